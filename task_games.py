"""The three games: plan_path, sudoku, sokoban, and the flow they share (`Game`). A tool agent proposes an
action (directly, or by a program run in the sandbox), the planner sees it and gives the final action;
`team` is 1 when the role's action (applied, or for the tool simulated) solves the puzzle, `local` is
progress (-1 for unparseable output). `workflow="single"` keeps the planner alone.

Success: one predicate decides the team reward and `env.success` (`score`'s "solved", i.e. the WHOLE
answer is legal and ends in the solved state). An illegal move list (into a wall, off the grid, a box
that cannot move) executes up to the blocked move: the agent stays where the walk stopped, the history
shows exactly the executed moves, and the answer never counts as a solve.

A game's board is seeded by SPLIT_SEED[split] + index and redrawn until split_of(board) == split (task.py).

    python -m pytest -q test_envs.py
"""
import copy
import random
import re
from collections import deque
from functools import lru_cache

from task import SPLIT_SEED, Task, run_program, split_of

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
BACK = {"U": "D", "D": "U", "L": "R", "R": "L"}


def random_floor(make_env, n, seed=0):
    """Team success when every role answers uniformly at random (Game.random_answer), on problems
    make_env(0..n-1): the floor next to an untrained model's number. Returns success and mean turns."""
    rng, wins, turns = random.Random(seed), 0, 0
    for i in range(n):
        env = make_env(i)
        while not env.done:
            for role in env.roles:
                env.step(role, env.random_answer(role, rng))
        wins, turns = wins + env.success, turns + env.turn
    return {"success": wins / max(1, n), "turns": turns / max(1, n)}


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


class Game(Task):
    """The flow the three games share. A subclass sets NAME, TITLE, ASK (tool code / tool direct /
    planner instructions), OPTIONS, and defines: parse(text) -> action or None, score(action) -> (team,
    local) without changing the state (team = 1 exactly when the action solves: the ONE success
    predicate), apply(action), state_text(), history_text(), show(action), solution() -> the action that
    solves the current state. Its constructor draws the board from random.Random(f"...{self.seed}...")."""
    ROLES = {"mas": ("tool", "planner"), "single": ("planner",)}
    OPTIONS = {**Task.OPTIONS, "tool_mode": dict(default="code", choices=("code", "direct"), help=(
        "games: code (tool agent writes a program, run in the sandbox) or direct"))}

    def __init__(self, split="train", index=0, **options):
        super().__init__(split, index, **options)
        self.tool_mode = self.options["tool_mode"]
        self.seed = SPLIT_SEED[split] + index  # disjoint seed ranges per split (the board's split: split_of)
        self.proposal = None  # the tool agent's action this turn (shown to the planner)

    def render(self, role):
        # Terse: every prompt token costs in training. The state comes last, right before the answer.
        ask = self.ASK["planner" if role == "planner" else self.tool_mode]
        text = f"{self.TITLE}, turn {self.turn + 1}/{self.max_turns}. {ask}\n" + self.history_text()
        if role == "planner" and "tool" in self.roles:
            shown = self.show(self.proposal) if self.proposal is not None else "(nothing valid)"
            text += f"Tool proposed: {shown}\n"
        return [{"role": "user", "content": text + self.state_text()}]

    def act(self, role, text):
        if role == "tool":
            self.proposal = self.run_tool(text)
            return self.score(self.proposal)
        act = self.parse(text)
        team, local = self.score(act)
        if act is not None:
            self.apply(act)
        self.success = team > 0  # the reward's own "solved": never a second, looser check
        self.proposal = None
        self.end_turn(self.success)
        return team, local

    def run_tool(self, text):
        out = text if self.tool_mode == "direct" else run_program(text)
        return None if out is None else self.parse(out)

    def reference(self, role):
        return self.as_answer(role, self.show(self.solution()))

    def as_answer(self, role, text):  # an action's text as that role answers it (the tool may write code)
        return f"```python\nprint({text!r})\n```" if role == "tool" and self.tool_mode == "code" else text

    def random_answer(self, role, rng):
        """A uniformly random action (the floor a trained model must beat): 1-30 random moves."""
        return self.as_answer(role, "".join(rng.choice("UDLR") for _ in range(rng.randint(1, 30))))


# ---- plan_path -------------------------------------------------------------------------------------
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


class PlanPath(Game):
    """Grid, walls, start, goal; the planner's moves move the agent. Done at the goal or after max_turns."""
    NAME, TITLE = "plan_path", "Plan-path"
    OPTIONS = {**Game.OPTIONS, "size": dict(type=int, default=10, help="grid size"),
               "wall_prob": dict(type=float, default=0.22, help="plan_path wall probability")}
    MIN_DIST = 2  # start to goal, in moves
    ASK = {"code": "Write a Python program that prints the moves from A to G as one line of U/D/L/R "
                   "(U up, D down, L left, R right). Reply with the program only.",
           "direct": "Propose moves from A to G (U up, D down, L left, R right). Reply with the moves only.",
           "planner": "Give the final moves from A to G (U up, D down, L left, R right). Reply with the moves only."}

    def __init__(self, split="train", index=0, **options):
        super().__init__(split, index, **options)
        seed, size, wall_prob = self.seed, self.options["size"], self.options["wall_prob"]
        if size < 3:
            raise ValueError(f"plan_path size must be >= 3, got {size}")
        self.size, self.max_moves = size, 4 * size * size
        rng = random.Random(f"plan_path/{seed}/{size}/{wall_prob}")
        for _ in range(10_000):
            cells = [(r, c) for r in range(size) for c in range(size)]
            walls = {p for p in cells if rng.random() < wall_prob}
            free = [p for p in cells if p not in walls]
            if len(free) < 2:
                continue
            start, goal = rng.sample(free, 2)
            # the split is decided by the map (walls + goal), not the start: every state a training
            # episode walks through on a map is then off the other splits too
            if split_of(self.board_key(size, walls, goal)) != split:
                continue
            dist = bfs(walls, goal, size)
            if dist.get(start, -1) >= self.MIN_DIST:
                break
        else:
            raise RuntimeError(f"plan_path: no solvable grid for seed {seed} (size {size})")
        self.walls, self.goal, self.pos, self.dist = frozenset(walls), goal, start, dist
        self.history = []  # planner moves applied so far, one string per turn

    @staticmethod
    def board_key(size, walls, goal):
        return ("plan_path", size, tuple(sorted(walls)), goal)

    def grid_text(self):
        cell = lambda p: "A" if p == self.pos else "G" if p == self.goal else "#" if p in self.walls else "."
        return "\n".join("".join(cell((r, c)) for c in range(self.size)) for r in range(self.size))

    def state_text(self):
        return f"Grid (A you, G goal, # wall):\n{self.grid_text()}"

    def history_text(self):
        moves = "".join(self.history)
        return f"Moves so far: {moves}\n" if moves else ""

    parse = staticmethod(parse_moves)
    show = staticmethod(str)

    def walk(self, moves):
        """Follow moves from the current position. Returns (end, executed): the walk stops before the
        first move into a wall or off the grid (or past max_moves); the answer is legal iff executed ==
        moves. Passing over the goal does not end it: the answer must END at the goal, else a long
        random walk would "solve" small grids by accident."""
        pos = self.pos
        for k, m in enumerate(moves[: self.max_moves]):
            dr, dc = MOVES[m]
            n = (pos[0] + dr, pos[1] + dc)
            if not (0 <= n[0] < self.size and 0 <= n[1] < self.size) or n in self.walls:
                return pos, moves[:k]
            pos = n
        return pos, moves[: self.max_moves]

    def score(self, moves):
        """team = 1 iff the whole answer is legal and ends on the goal; local = progress in BFS distance
        to where the walk stopped, (d_before - d_after) / d_before, + team."""
        if moves is None:
            return 0.0, -1.0  # unparseable output: a defined format penalty
        end, done = self.walk(moves)
        d0, d1 = self.dist[self.pos], self.dist[end]
        solved = float(end == self.goal and done == moves)
        return solved, (d0 - d1) / max(d0, 1) + solved  # d0 = 0: stopped on the goal by a bump

    def apply(self, moves):
        self.pos, done = self.walk(moves)
        self.history.append(done)  # exactly the executed moves

    def solution(self):
        if self.pos == self.goal:  # stopped here by an illegal answer: unsolved; step off and back
            return next(m + BACK[m] for m in MOVES if self.walk(m + BACK[m]) == (self.goal, m + BACK[m]))
        path, pos = "", self.pos
        while pos != self.goal:
            for m, (dr, dc) in MOVES.items():
                n = (pos[0] + dr, pos[1] + dc)
                if self.dist.get(n, 1 << 30) == self.dist[pos] - 1:
                    path, pos = path + m, n
                    break
        return path


# ---- sudoku ----------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def sudoku_peers(n):
    """For each cell of an n x n sudoku, the other cells of its row, column and box."""
    b = int(n ** 0.5)
    unit = lambda i, j: i // n == j // n or i % n == j % n or (i // n // b, i % n // b) == (j // n // b, j % n // b)
    return [tuple(j for j in range(n * n) if j != i and unit(i, j)) for i in range(n * n)]


def sudoku_solve(grid, n, limit=2):
    """Up to `limit` solutions of a grid (list of n*n ints, 0 = empty), by backtracking on the cell
    with the fewest candidates (bitmasks). Used to build puzzles with exactly one solution."""
    peers, full, g, out = sudoku_peers(n), (1 << (n + 1)) - 2, list(grid), []

    def rec():
        best, best_mask, best_count = -1, 0, n + 1
        for i in range(n * n):
            if g[i] == 0:
                used = 0
                for j in peers[i]:
                    used |= 1 << g[j]
                mask = full & ~used
                count = bin(mask).count("1")
                if count == 0:
                    return False
                if count < best_count:
                    best, best_mask, best_count = i, mask, count
        if best < 0:
            out.append(list(g))
            return len(out) >= limit
        for v in range(1, n + 1):
            if best_mask >> v & 1:
                g[best] = v
                if rec():
                    return True
        g[best] = 0
        return False

    rec()
    return out


def parse_grid(text, n):
    """An n x n grid from free text: the last n lines holding exactly n cells each (digits, '.' or '0'
    for empty; spaces, commas, bars and brackets ignored), or one line with n*n cells. None if absent."""
    if not isinstance(text, str):
        return None
    rows = [re.sub(r"[\s,|\[\]()`'\"+-]", "", ln) for ln in text.splitlines()]
    rows = [r for r in rows if r]
    ok = lambda r, k: len(r) == k and all(ch.isdigit() or ch == "." for ch in r)
    if n > 9:
        return None
    for k, want in ((n, n), (1, n * n)):
        if len(rows) >= k and all(ok(r, want) for r in rows[-k:]):
            cells = "".join(rows[-k:])
            grid = [0 if ch == "." else int(ch) for ch in cells]
            return grid if all(0 <= v <= n for v in grid) else None
    return None


class Sudoku(Game):
    """n x n Sudoku (4 default, 9 by size) with exactly one solution. An action is a whole grid; it is
    accepted only if it keeps every given and has no repeated digit in a row, column or box; then it
    replaces the current grid. Solved when full and valid (the unique solution, since givens are kept)."""
    NAME, TITLE = "sudoku", "Sudoku"
    OPTIONS = {**Game.OPTIONS, "size": dict(type=int, default=4, help="grid size")}
    ASK = {"code": "Write a Python program that prints the solved grid, one row per line. Reply with the program only.",
           "direct": "Propose the solved grid, one row of digits per line. Reply with the grid only.",
           "planner": "Give the final solved grid, one row of digits per line. Reply with the grid only."}

    def __init__(self, split="train", index=0, **options):
        super().__init__(split, index, **options)
        seed, size = self.seed, self.options["size"]
        if size not in (4, 9):
            raise ValueError(f"sudoku size must be 4 or 9, got {size}")
        n, rng = size, random.Random(f"sudoku/{seed}/{size}")
        self.n = n
        # a random full grid: shuffle digits, rows within bands, bands (keeps validity), from a base pattern;
        # then remove cells while the solution stays unique, up to ~65% holes. The split is decided by the
        # puzzle (its givens). Not by the solution grid: this generator makes only ~100 distinct 4x4 grids,
        # which would leave a test split of about ten answers.
        b = int(n ** 0.5)
        for _ in range(10_000):
            digits = rng.sample(range(1, n + 1), n)
            rows = [g * b + r for g in rng.sample(range(b), b) for r in rng.sample(range(b), b)]
            cols = [g * b + c for g in rng.sample(range(b), b) for c in rng.sample(range(b), b)]
            self.solution_grid = [digits[(b * (r % b) + r // b + c) % n] for r in rows for c in cols]
            grid = list(self.solution_grid)
            for i in rng.sample(range(n * n), n * n):
                if sum(v == 0 for v in grid) >= int(0.65 * n * n):
                    break
                v, grid[i] = grid[i], 0
                if len(sudoku_solve(grid, n)) != 1:
                    grid[i] = v
            if split_of(("sudoku", n, tuple(grid))) == split:
                break
        else:
            raise RuntimeError(f"sudoku: no {split} puzzle for seed {seed}")
        self.givens, self.grid = tuple(grid), list(grid)

    def parse(self, text):
        return parse_grid(text, self.n)

    def valid(self, grid):
        """Keeps every given and repeats no digit in a row, column or box (empty cells allowed)."""
        n, b = self.n, int(self.n ** 0.5)
        if any(g and v != g for v, g in zip(grid, self.givens)):
            return False
        units = [[r * n + c for c in range(n)] for r in range(n)] + [[r * n + c for r in range(n)] for c in range(n)]
        units += [[(br + x) * n + bc + y for x in range(b) for y in range(b)]
                  for br in range(0, n, b) for bc in range(0, n, b)]
        for u in units:
            vals = [grid[i] for i in u if grid[i]]
            if len(vals) != len(set(vals)):
                return False
        return True

    def correct(self, grid):
        return sum(v == s for v, s, g in zip(grid, self.solution_grid, self.givens) if g == 0)

    def score(self, grid):
        """local = change in the fraction of empty cells holding the right digit, + 1 if solved;
        -0.5 for a grid that breaks a given or repeats a digit, -1 for no grid at all."""
        if grid is None:
            return 0.0, -1.0
        if not self.valid(grid):
            return 0.0, -0.5
        holes = max(1, self.givens.count(0))
        solved = float(all(grid))  # full + valid + givens kept = the unique solution
        return solved, (self.correct(grid) - self.correct(self.grid)) / holes + solved

    def apply(self, grid):
        if self.valid(grid):  # an invalid grid is rejected whole: the state does not change
            self.grid = list(grid)

    def show(self, grid):
        return "\n".join("".join(str(v) if v else "." for v in grid[r * self.n:(r + 1) * self.n])
                         for r in range(self.n))

    def state_text(self):
        return f"Grid ({self.n}x{self.n}, . empty):\n{self.show(self.grid)}"

    def history_text(self):
        return ""  # the grid itself carries the history

    def solution(self):
        return self.solution_grid

    def random_answer(self, role, rng):
        """A uniformly random action: a grid of random digits."""
        return self.as_answer(role, self.show([rng.randint(1, self.n) for _ in range(self.n * self.n)]))


# ---- sokoban ---------------------------------------------------------------------------------------
UNKNOWN = "unknown"  # sokoban_dist gave up at its state limit: neither a distance nor a proven deadlock


@lru_cache(maxsize=1 << 16)
def sokoban_dist(walls, goals, player, boxes, max_states=200_000):
    """Fewest moves to put every box on a goal (BFS over (player, boxes)), None if unsolvable (every
    reachable state seen), UNKNOWN if it stopped at max_states first (large levels, far states)."""
    start = (player, boxes)
    seen, q = {start: 0}, deque([start])
    while q and len(seen) < max_states:
        p, bx = q.popleft()
        if set(bx) == goals:
            return seen[(p, bx)]
        for dr, dc in MOVES.values():
            n = (p[0] + dr, p[1] + dc)
            if n in walls:
                continue
            nb = bx
            if n in bx:
                nn = (n[0] + dr, n[1] + dc)
                if nn in walls or nn in bx:
                    continue
                nb = tuple(sorted(nn if x == n else x for x in bx))
            s = (n, nb)
            if s not in seen:
                seen[s] = seen[(p, bx)] + 1
                q.append(s)
    return UNKNOWN if q else None


class Sokoban(Game):
    """size x size room (outer wall), `boxes` boxes and as many goals. Levels come from reverse play
    (boxes start on goals, the player pulls them away) and are checked solvable by BFS; a failed attempt
    retries with the next sub-seed. A move into a wall or an unpushable box stops the move list."""
    NAME, TITLE = "sokoban", "Sokoban"
    OPTIONS = {**Game.OPTIONS, "size": dict(type=int, default=6, help="grid size"),
               "boxes": dict(type=int, default=1, help="sokoban boxes")}
    MIN_MOVES, MAX_MOVES = 3, 200  # a level needs at least MIN_MOVES; an answer is cut at MAX_MOVES
    ASK = {"code": "Write a Python program that prints the moves that push every box (B) onto a goal (O) as one "
                   "line of U/D/L/R. Reply with the program only.",
           "direct": "Propose moves that push every box (B) onto a goal (O) (U up, D down, L left, R right). "
                     "Reply with the moves only.",
           "planner": "Give the final moves that push every box (B) onto a goal (O) (U up, D down, L left, "
                      "R right). Reply with the moves only."}

    def __init__(self, split="train", index=0, **options):
        super().__init__(split, index, **options)
        seed, size, boxes = self.seed, self.options["size"], self.options["boxes"]
        if not 5 <= size <= 12:
            raise ValueError(f"sokoban size must be in [5, 12], got {size}")
        if not 1 <= boxes <= (size - 2) ** 2 // 4:
            raise ValueError(f"sokoban boxes must be in [1, {(size - 2) ** 2 // 4}] for size {size}, got {boxes}")
        self.size, self.max_moves = size, self.MAX_MOVES
        for attempt in range(1000):
            level = self._generate(random.Random(f"sokoban/{seed}/{size}/{boxes}/{attempt}"), size, boxes, split)
            if level is not None and level[4] >= self.MIN_MOVES:
                break
        else:
            raise RuntimeError(f"sokoban: no solvable level for seed {seed} (size {size}, boxes {boxes})")
        self.walls, self.goals, self.player, self.boxes, _ = level
        self.history = []

    @staticmethod
    def _generate(rng, size, nbox, split):
        inner = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
        walls = {(r, c) for r in range(size) for c in range(size) if (r, c) not in inner}
        walls |= {p for p in inner if rng.random() < 0.1}
        free = [p for p in inner if p not in walls]
        if len(free) < nbox + 2:
            return None
        picks = rng.sample(free, nbox + 1)
        goals, player, boxes = frozenset(picks[:nbox]), picks[nbox], set(picks[:nbox])
        for _ in range(rng.randrange(10, 40)):  # reverse play: step back, maybe pulling a box along
            dr, dc = rng.choice(list(MOVES.values()))
            back = (player[0] - dr, player[1] - dc)
            if back in walls or back in boxes:
                continue
            front = (player[0] + dr, player[1] + dc)
            if front in boxes and rng.random() < 0.7:
                boxes.remove(front)
                boxes.add(player)
            player = back
        boxes = tuple(sorted(boxes))
        if set(boxes) == goals:
            return None
        # the split is decided by the whole level (the room alone has too few shapes at 6x6: walls are rare)
        if split_of(("sokoban", size, tuple(sorted(walls)), tuple(sorted(goals)), player, boxes)) != split:
            return None
        d = sokoban_dist(frozenset(walls), goals, player, boxes)
        return None if d is None or d is UNKNOWN else (frozenset(walls), goals, player, boxes, d)

    parse = staticmethod(parse_moves)
    show = staticmethod(str)

    def walk(self, moves):
        """(player, boxes, executed) after the moves: the walk stops before the first blocked move (a
        wall, a box that cannot move) or past max_moves; the answer is legal iff executed == moves."""
        p, bx = self.player, set(self.boxes)
        for k, m in enumerate(moves[: self.max_moves]):
            dr, dc = MOVES[m]
            n = (p[0] + dr, p[1] + dc)
            if n in self.walls:
                return p, tuple(sorted(bx)), moves[:k]
            if n in bx:
                nn = (n[0] + dr, n[1] + dc)
                if nn in self.walls or nn in bx:
                    return p, tuple(sorted(bx)), moves[:k]
                bx.remove(n)
                bx.add(nn)
            p = n
        return p, tuple(sorted(bx)), moves[: self.max_moves]

    def dist(self, player, boxes):
        return sokoban_dist(self.walls, self.goals, player, boxes)

    def score(self, moves):
        """team = 1 iff the whole answer is legal and ends with every box on a goal; local = progress
        in solver distance, (d_before - d_after) / d_before, -1 on a deadlock (unsolvable state), + team.
        Where the solver stops at its state limit (UNKNOWN, large levels) progress is not measured: 1 if
        every box ends on a goal, else 0 (never the deadlock penalty: the state may well be solvable)."""
        if moves is None:
            return 0.0, -1.0
        p, bx, done = self.walk(moves)
        d0, d1 = self.dist(self.player, self.boxes), self.dist(p, bx)
        if d1 is None:  # proven unsolvable (d0 None implies d1 None: nothing leaves a deadlock)
            return 0.0, -1.0
        solved = float(set(bx) == self.goals and done == moves)
        if UNKNOWN in (d0, d1):
            return solved, float(d1 == 0) + solved  # d1 == 0 < d0: every box placed is full progress
        return solved, (d0 - d1) / max(d0, 1) + solved

    def apply(self, moves):
        self.player, self.boxes, done = self.walk(moves)
        self.history.append(done)  # exactly the executed moves

    def state_text(self):
        def cell(p):
            if p in self.walls:
                return "#"
            if p in self.boxes:
                return "*" if p in self.goals else "B"
            if p == self.player:
                return "+" if p in self.goals else "P"
            return "O" if p in self.goals else "."
        rows = ("".join(cell((r, c)) for c in range(self.size)) for r in range(self.size))
        return "Room (P you, B box, O goal, * box on goal, # wall):\n" + "\n".join(rows)

    def history_text(self):
        moves = "".join(self.history)
        return f"Moves so far: {moves}\n" if moves else ""

    def solution(self):
        """Greedy descent on the solver distance: a shortest solution from the current state."""
        path, p, bx = "", self.player, self.boxes
        d = self.dist(p, bx)
        if d is None or d is UNKNOWN:
            return ""  # deadlocked (nothing solves it any more), or past what the solver can search
        if d == 0:  # every box on a goal after an illegal answer: unsolved; a legal step off and back
            for m in MOVES:
                q, nb, done = self.walk(m + BACK[m])
                if done == m + BACK[m] and set(nb) == self.goals:
                    return done
        while d > 0:
            for m, (dr, dc) in MOVES.items():
                e = copy.copy(self)
                e.player, e.boxes = p, bx
                q, nb, done = e.walk(m)
                if done == m and self.dist(q, nb) == d - 1:
                    path, p, bx, d = path + m, q, nb, d - 1
                    break
        return path

