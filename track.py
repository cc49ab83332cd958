"""Experiment trackers for `train.py --report_to`: none (default), tensorboard, wandb, trackio.

metrics.jsonl stays the source of truth and is written either way; a tracker receives, from rank 0 only:
the run's full config once, every metrics.jsonl line at its step (the held-out eval curve included:
`eval/success`), and a small table of sample completions per role. Lists (per-rank memory) become one
scalar per rank. Each backend is an optional package: a missing one is a one-line error naming the pip
command (`check`), never a silent no-op. Offline use:
    tensorboard   writes OUT_DIR/tensorboard (no network ever); tensorboard --logdir OUT_DIR/tensorboard
    wandb         WANDB_MODE=offline python train.py ... --report_to wandb   (then `wandb sync` later)
    trackio       local-first: a SQLite database in $TRACKIO_DIR (default ~/.cache/huggingface/trackio);
                  `trackio show --project at-grpo` to browse it
A resumed run continues the same tracker run (tensorboard drops the events past the checkpoint's step;
wandb resumes by the id kept in OUT_DIR/wandb_id, its x axis is the metric train/step: the re-done steps
are logged again, never dropped as "not increasing").

    python -m pytest -q test_track.py
"""
import importlib.util
import json
import os
import uuid

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def check(kind):
    """None if `kind` can run here, else the one-line error for the user."""
    if kind != "none" and importlib.util.find_spec(PACKAGES[kind]) is None:
        return f"--report_to {kind} needs the {PACKAGES[kind]} package: pip install {PACKAGES[kind]}"
    return None


def scalars(m):
    """A metrics line as flat name -> float (lists: one per rank, name/rank<i>; non-numbers dropped)."""
    out = {}
    for k, v in m.items():
        if isinstance(v, bool) or k == "step":
            continue
        if isinstance(v, (int, float)):
            out[k] = float(v)
        elif isinstance(v, list):
            out.update({f"{k}/rank{i}": float(x) for i, x in enumerate(v) if isinstance(x, (int, float))})
    return out


class Tracker:
    """One tracker run. `log(m)` takes a metrics.jsonl line; `samples(step, rows)` rows of
    {"role", "reward", "advantage", "text"}; `close()` at the end."""

    def __init__(self, kind, out_dir, config, start_step=0, project="at-grpo"):
        self.kind = kind
        name = os.path.basename(os.path.normpath(out_dir))
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            # purge_step: a resumed run's events past the checkpoint are dropped, as in metrics.jsonl
            self.run = SummaryWriter(os.path.join(out_dir, "tensorboard"), purge_step=start_step or None)
            if not start_step:
                self.run.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```", 0)
        elif kind == "wandb":
            import wandb
            id_path = os.path.join(out_dir, "wandb_id")
            run_id = open(id_path).read().strip() if os.path.exists(id_path) else uuid.uuid4().hex[:12]
            with open(id_path, "w") as f:
                f.write(run_id)
            self.run = wandb.init(project=project, name=name, id=run_id, resume="allow", dir=out_dir, config=config)
            # x axis: the training step as a metric. wandb's own step may only grow, and a resumed run logs
            # again the steps after its checkpoint: with log(step=) wandb would drop them (online)
            self.run.define_metric("train/step")
            self.run.define_metric("*", step_metric="train/step")
        elif kind == "trackio":
            import trackio
            self.run = trackio.init(project=project, name=name, config=config, resume="allow")
        else:
            raise ValueError(f"unknown tracker {kind!r}")

    def log(self, m):
        step, vals = m["step"], scalars(m)
        if self.kind == "tensorboard":
            for k, v in vals.items():
                self.run.add_scalar(k, v, step)
        elif self.kind == "wandb":
            self.run.log({**vals, "train/step": step})
        else:
            import trackio
            trackio.log(vals, step=step)

    def samples(self, step, rows):
        cols = ["step", "role", "reward", "advantage", "text"]
        data = [[step, r["role"], r["reward"], r["advantage"], r["text"]] for r in rows]
        if self.kind == "tensorboard":  # a markdown table in the TEXT tab
            md = "| role | reward | advantage | text |\n|---|---|---|---|\n" + "".join(
                f"| {r['role']} | {r['reward']:+.2f} | {r['advantage']:+.2f} | "
                f"{r['text'].replace('|', '/').replace(chr(10), ' ')[:300]} |\n" for r in rows)
            self.run.add_text("completions", md, step)
        elif self.kind == "wandb":
            import wandb
            self.run.log({"completions": wandb.Table(columns=cols, data=data), "train/step": step})
        else:
            import trackio
            trackio.log({"completions": trackio.Table(columns=cols, data=data)}, step=step)

    def close(self):
        if self.kind == "tensorboard":
            self.run.close()
        elif self.kind == "wandb":
            self.run.finish()
        else:
            import trackio
            trackio.finish()
