"""Tasks and their multi-agent workflows. Each `make(...)` returns ONE problem instance (an `env`).

The contract every task keeps (train.py, rollout.py and eval.py rely on it):
    env.roles            tuple of role names, acting order within a turn
    env.prompt(role)     chat messages for that role, rendered from the CURRENT state
    env.step(role, text) apply that role's output, return that role's reward (any text is legal input)
    env.done, env.success, env.turn
    env.clone()          fully independent copy (tree sampling steps, scores and keeps clones)
    env.reference(role)  a correct output text for that role in the current state, or None

Reward of a role: alpha * team + local. `team` is 1 when that role's action (applied, or for the tool
agent simulated on a copy) reaches the goal; `local` is the role's progress-shaped score.

Seeds: every instance owns its RNG seeded from (split, index); splits use disjoint seed ranges, so a
test instance is never a training instance. The global RNG is never touched.

    python -m pytest -q test_envs.py
"""
import copy
import random
import re
from collections import deque

TASKS = ("plan_path",)
SPLIT_SEED = {"train": 0, "val": 10_000_000, "test": 20_000_000}  # disjoint ranges of instance seeds
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def make(task, split="train", index=0, **opts):
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if split not in SPLIT_SEED:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEED)}")
    if not 0 <= index < 10_000_000:
        raise ValueError(f"index {index} out of range [0, 10_000_000)")
    return PlanPath(seed=SPLIT_SEED[split] + index, **opts)


def parse_moves(text):
    """Moves from free text: the last non-empty line, spaces/commas dropped, must be only U/D/L/R.
    Returns None when the text holds no such line (a format failure, never an exception)."""
    if not isinstance(text, str):
        return None
    m = re.findall(r"\\boxed\{([^{}]*)\}", text)  # reasoning models may box their answer
    lines = [m[-1]] if m else [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    last = re.sub(r"[\s,`'\"\.]", "", lines[-1])
    return last if re.fullmatch(r"[UDLR]{1,200}", last) else None


def bfs(walls, goal, size):
    """Distance to goal from every reachable cell (BFS from the goal; moves are reversible)."""
    dist = {goal: 0}
    q = deque([goal])
    while q:
        r, c = q.popleft()
        for dr, dc in MOVES.values():
            n = (r + dr, c + dc)
            if 0 <= n[0] < size and 0 <= n[1] < size and n not in walls and n not in dist:
                dist[n] = dist[(r, c)] + 1
                q.append(n)
    return dist


class PlanPath:
    """Grid, walls, start, goal. Roles: a tool agent proposes a move string (or, in tool_mode="code",
    writes a Python program that prints one, run in the sandbox); the planner sees the proposal and
    gives the final moves, which move the agent. Done at the goal or after max_turns."""

    def __init__(self, seed, size=10, wall_prob=0.22, min_dist=2, max_turns=4, alpha=1.0,
                 tool_mode="code", workflow="mas", max_moves=None):
        if size < 3:
            raise ValueError(f"plan_path size must be >= 3, got {size}")
        if tool_mode not in ("code", "direct"):
            raise ValueError(f"tool_mode must be 'code' or 'direct', got {tool_mode!r}")
        if workflow not in ("mas", "single"):
            raise ValueError(f"workflow must be 'mas' or 'single', got {workflow!r}")
        self.size, self.max_turns, self.alpha, self.tool_mode = size, max_turns, alpha, tool_mode
        self.roles = ("tool", "planner") if workflow == "mas" else ("planner",)
        self.max_moves = max_moves or 4 * size * size
        rng = random.Random(f"plan_path/{seed}/{size}/{wall_prob}")
        for _ in range(10_000):
            cells = [(r, c) for r in range(size) for c in range(size)]
            walls = {p for p in cells if rng.random() < wall_prob}
            free = [p for p in cells if p not in walls]
            if len(free) < 2:
                continue
            start, goal = rng.sample(free, 2)
            dist = bfs(walls, goal, size)
            if dist.get(start, -1) >= min_dist:
                break
        else:
            raise RuntimeError(f"plan_path: no solvable grid for seed {seed} (size {size})")
        self.walls, self.goal, self.pos, self.dist = frozenset(walls), goal, start, dist
        self.turn, self.done, self.success = 0, False, False
        self.history = []      # planner moves applied so far, one string per turn
        self.proposal = None   # the tool agent's proposal this turn (text shown to the planner)

    # ---- rendering -------------------------------------------------------------------------------
    def grid_text(self):
        rows = []
        for r in range(self.size):
            row = ""
            for c in range(self.size):
                p = (r, c)
                row += "A" if p == self.pos else "G" if p == self.goal else "#" if p in self.walls else "."
            rows.append(row)
        return "\n".join(rows)

    def prompt(self, role):
        # The grid comes last, right before the answer: its cells then sit at fixed distances from the
        # answer, which a small model learns far faster. Terse: every prompt token costs in training.
        if role == "tool" and self.tool_mode == "code":
            ask = ("Write a Python program that prints the moves from A to G as one line of U/D/L/R "
                   "(U up, D down, L left, R right). Reply with the program only.")
        elif role == "tool":
            ask = "Propose moves from A to G (U up, D down, L left, R right). Reply with the moves only."
        elif role == "planner":
            ask = "Give the final moves from A to G (U up, D down, L left, R right). Reply with the moves only."
        else:
            raise ValueError(f"plan_path has no role {role!r}")
        text = f"Plan-path, turn {self.turn + 1}/{self.max_turns}. {ask}\n"
        if self.history:
            text += f"Moves so far: {''.join(self.history)}\n"
        if role == "planner" and "tool" in self.roles:
            text += f"Tool proposed: {self.proposal or '(nothing valid)'}\n"
        text += f"Grid (A you, G goal, # wall):\n{self.grid_text()}"
        return [{"role": "user", "content": text}]

    # ---- dynamics --------------------------------------------------------------------------------
    def walk(self, moves):
        """Follow moves from the current position. Returns (end, legal): the walk stops at the first
        move into a wall or off the grid (legal=False). Passing over the goal does not end it: the
        answer must END at the goal, else a long random walk would "solve" small grids by accident."""
        pos = self.pos
        for m in moves[: self.max_moves]:
            dr, dc = MOVES[m]
            n = (pos[0] + dr, pos[1] + dc)
            if not (0 <= n[0] < self.size and 0 <= n[1] < self.size) or n in self.walls:
                return pos, False
            pos = n
        return pos, len(moves) <= self.max_moves

    def score(self, moves):
        """(team, local) for moves from the current position, without changing the state.
        local = progress in BFS distance, (d_before - d_after) / d_before, + 1 if solved."""
        if moves is None:
            return 0.0, -1.0  # unparseable output: a defined format penalty
        end, legal = self.walk(moves)
        d0, d1 = self.dist[self.pos], self.dist[end]
        solved = float(end == self.goal and legal)
        return solved, (d0 - d1) / d0 + solved

    def step(self, role, text):
        if self.done:
            raise RuntimeError("step() on a finished episode")
        if role not in self.roles:
            raise ValueError(f"plan_path has no role {role!r}")
        if role == "tool":
            moves = self.run_tool(text)
            self.proposal = moves
            team, local = self.score(moves)
        else:
            moves = parse_moves(text)
            team, local = self.score(moves)
            if moves is not None:
                self.pos, _ = self.walk(moves)
                self.history.append(moves[: self.max_moves])
            self.success = self.pos == self.goal
            self.turn += 1
            self.proposal = None
            self.done = self.success or self.turn >= self.max_turns
        return self.alpha * team + local

    def run_tool(self, text):
        if self.tool_mode == "direct":
            return parse_moves(text)
        import sandbox  # model-written code runs only inside the sandbox
        code = extract_code(text)
        if code is None:
            return None
        res = sandbox.run(code, timeout=5.0)
        return None if res.timed_out or res.returncode != 0 else parse_moves(res.stdout)

    def reference(self, role):
        path, pos = "", self.pos
        while pos != self.goal:
            for m, (dr, dc) in MOVES.items():
                n = (pos[0] + dr, pos[1] + dc)
                if self.dist.get(n, 1 << 30) == self.dist[pos] - 1:
                    path, pos = path + m, n
                    break
        if role == "tool" and self.tool_mode == "code":
            return f"```python\nprint({path!r})\n```"
        return path

    def clone(self):
        return copy.deepcopy(self)


def extract_code(text):
    """The last fenced code block, or the whole text if it has no fence; None for empty text."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", text, flags=re.S)
    return blocks[-1] if blocks else text
