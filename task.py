"""What every task shares: the base class `Task`, the role's `Reward`, the splits (`split_of`) and the
sandboxed run of a model's program. A task is one file holding a Task subclass, plus one line in
envs.TASKS.

The contract every task keeps (train.py, rollout.py and eval.py rely on it):
    env.roles            tuple of role names, acting order within a turn
    env.prompt(role)     chat messages for that role, rendered from the CURRENT state
    env.step(role, text) apply that role's output, return that role's Reward (any text is legal input)
    env.done, env.success (the task's ONE team metric), env.turn
    env.clone()          fully independent copy (tree sampling steps, scores and keeps clones)
    env.reference(role)  a correct output text for that role in the current state, or None
    env.before_cut(role, text)  what of a response cut at max_tokens the task still judges ("": no answer)
    env.branched(role, branches)  tree sampling's K stepped clones, told to the one it goes on from (default: no-op)

A subclass sets NAME, ROLES and OPTIONS and defines render(role) -> messages, act(role, text) -> (team,
local), reference(role); it calls end_turn(stop) after the last role of a turn. The base checks the
options, guards unknown roles and finished episodes, and mixes the reward.

Splits: every procedural instance owns its RNG, seeded from (split, index) in disjoint seed ranges, AND
a board belongs to the split that a hash of its content names (`split_of`): the generator redraws until
its board hashes into the requested split. Small boards repeat across seeds, so disjoint seeds alone let
test boards into training; by content they never can, at any run length, with no list of boards kept.
The global RNG is never touched. Dataset tasks read real datasets through data.py (index wraps around).

    python -m pytest -q test_envs.py
"""
import copy
import hashlib
import re

SPLIT_SEED = {"train": 0, "val": 10_000_000, "test": 20_000_000}  # disjoint ranges of instance seeds
SPLIT_SHARE = (("test", 0.1), ("val", 0.1), ("train", 0.8))  # of all boards, by content hash
MAX_INDEX = 10_000_000  # an index past this would run into the next split's seeds


def split_of(content):
    """The split a board belongs to: a pure function of its content (any repr-able canonical key)."""
    u = int(hashlib.sha256(repr(content).encode()).hexdigest()[:12], 16) / 16 ** 12
    for split, share in SPLIT_SHARE:
        if u < share:
            return split
        u -= share
    return SPLIT_SHARE[-1][0]


def extract_code(text):
    """The last fenced code block, or the whole text if it has no fence; None for empty text."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", text, flags=re.S)
    return blocks[-1] if blocks else text


def closed_code(text):
    """A cut response up to the end of its last closed ``` block: its code was complete before the cut.
    "" when no block closed, or when a fence opens after the last one (a new, cut program)."""
    ends = [m.end() for m in re.finditer(r"```(?:python|py)?\s*\n(.*?)```", text, flags=re.S)]
    return text[:ends[-1]] if ends and "```" not in text[ends[-1]:] else ""


def run_program(text):
    """stdout of the program in a model's text, run in the sandbox; None when there is no code or it
    fails or times out. Model-written code runs only inside the sandbox."""
    import sandbox
    code = extract_code(text)
    if code is None:
        return None
    res = sandbox.run(code, timeout=5.0)
    return None if res.timed_out or res.returncode != 0 else res.stdout


class Reward(float):
    """A role's reward for one step: alpha * team + local (THE reward mix: edit this line for an
    ablation; Task.step passes local already weighted by the local_reward option), a float that also
    carries its parts, so a branch rule or a log can use team success alone."""

    def __new__(cls, team, local, alpha):
        r = super().__new__(cls, alpha * team + local)
        r.team, r.local, r.alpha = float(team), float(local), alpha
        return r

    def __reduce__(self):  # pickle / deepcopy rebuild from the parts (float's own would pass one value)
        return Reward, (self.team, self.local, self.alpha)


# the option of the tasks that read data.py's datasets (math, code)
DATA_OPTION = {"data": dict(help="math/code data: default = the paper's hub sets; 'offline' (shipped), "
                                 "'arith' (math: procedural word problems), 'funcs' (code: procedural short "
                                 "functions), 'humaneval' (code, test split only), a local "
                                 "JSONL/Parquet file (one set: its val/test are its training problems, with a "
                                 "warning), or split:FILE (split by content hash, 80/10/10)")}


class Task:
    """One problem instance of a task. Subclasses keep the signature (split, index, **options)."""
    NAME = "task"  # the registry name, in error messages
    TITLE = None   # how error messages name the task, when not NAME
    ROLES = {"mas": (), "single": ()}  # acting order within a turn, per workflow
    OPTIONS = {  # argparse kwargs of each option (envs.add_task_args makes them flags)
        "max_turns": dict(type=int, default=4, help="turns per episode"),
        "alpha": dict(type=float, default=1.0, help="reward of a role = alpha * team + local_reward * local"),
        "local_reward": dict(type=float, default=1.0, help="weight of the local term (progress, format): 0 = the "
                                                           "team outcome alone, a sparse reward"),
        "workflow": dict(default="mas", choices=("mas", "single"),
                         help="mas (every role) or single (one agent does the whole job)"),
    }

    def __init__(self, split="train", index=0, **options):
        if split not in SPLIT_SEED:
            raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEED)}")
        if not 0 <= index < MAX_INDEX:
            raise ValueError(f"index {index} out of range [0, {MAX_INDEX:_})")
        self.options = self.resolve(options)
        self.split, self.index = split, index
        self.max_turns, self.alpha, self.workflow = (self.options[k] for k in ("max_turns", "alpha", "workflow"))
        self.roles = self.ROLES[self.workflow]
        self.turn, self.done, self.success = 0, False, False
        self.notes = {}  # what a role did, for evaluation reports: name -> [times it held, times asked] (note)

    @classmethod
    def resolve(cls, options):
        """The options with defaults filled in, checked: known names, max_turns >= 1, closed value sets."""
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if unknown:
            raise ValueError(f"{cls.NAME} has no option {', '.join(unknown)}; its options: {', '.join(cls.OPTIONS)}")
        opts = {k: options.get(k, spec.get("default")) for k, spec in cls.OPTIONS.items()}
        if opts["max_turns"] < 1:
            raise ValueError(f"max_turns must be >= 1, got {opts['max_turns']}")
        for k, spec in cls.OPTIONS.items():
            if "choices" in spec and opts[k] not in spec["choices"]:
                raise ValueError(f"{k} must be {' or '.join(map(repr, spec['choices']))}, got {opts[k]!r}")
        return opts

    @classmethod
    def count(cls, split, **options):
        """Distinct problems of a split; None = procedural (unlimited)."""
        return None

    def guard(self, role):
        if role not in self.roles:
            raise ValueError(f"{self.TITLE or self.NAME} has no role {role!r}")

    def prompt(self, role):
        self.guard(role)
        return self.render(role)

    def step(self, role, text):
        if self.done:
            raise RuntimeError("step() on a finished episode")
        self.guard(role)
        team, local = self.act(role, text)
        return Reward(team, self.options["local_reward"] * local, self.alpha)

    def end_turn(self, stop):
        """After the last role of a turn: the episode ends on `stop` or when the turns run out."""
        self.turn += 1
        self.done = bool(stop) or self.turn >= self.max_turns

    def note(self, name, held):
        """Count one observation of `name` (e.g. "tester/right"): rollout.evaluate reports the share that held,
        over every episode (eval.py: notes/<name>), so what each role learned reads beside success."""
        hits, n = self.notes.get(name, (0, 0))
        self.notes[name] = [hits + bool(held), n + 1]

    def render(self, role):
        raise NotImplementedError

    def act(self, role, text):
        raise NotImplementedError

    def reference(self, role):
        return None

    def before_cut(self, role, text):
        """The part of a response cut at max_tokens (no EOS) that the task judges: by default none (no
        answer); a task whose answers have a visible end (a closed code fence, a closed \\boxed{}) returns
        the text when the answer ended before the cut, so a complete answer followed by cut prose counts."""
        return ""

    def branched(self, role, branches):
        """Tree sampling stepped `role` on K clones of one state (`branches`, this one among them) and goes on
        from this one: a task may keep what the siblings did (code: the coder's programs, for the tester's
        reward). By default nothing; one-branch rollouts (parallel sampling, evaluation) never call it."""

    def clone(self):
        return copy.deepcopy(self)
