"""What a run records: each step's metrics (step_metrics, summed over ranks), metrics.jsonl and
samples.jsonl lines and the log line (record_step), and the experiment trackers of `train.py
--report_to`: none (default), tensorboard, wandb, trackio.

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

import grouping
from common import all_reduce_sums, append_lines

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


# ---- what a step records: metrics.jsonl, samples.jsonl, the log line (train.py calls these)

def step_metrics(step, samples, finals, roles, updates, policies, adv_norm="group"):
    """One step's metrics, by name: counts summed over ranks, then the means of the union."""
    stats = grouping.group_stats([s.reward for s in samples], [s.key for s in samples], adv_norm)
    sums = {"wins": sum(e.success for e in finals), "episodes": len(finals), "samples": len(samples),
            "tokens": sum(len(s.response_ids) for s in samples), "truncated": sum(s.truncated for s in samples), **stats}
    for role in roles:
        sums[f"reward/{role}"] = sum(s.reward for s in samples if s.role == role)
        sums[f"n/{role}"] = sum(s.role == role for s in samples)
        sums[f"cut/{role}"] = sum(s.truncated for s in samples if s.role == role)  # hit max_tokens, no EOS
    s = all_reduce_sums(sums)
    m = {"step": step, "success": s["wins"] / max(1, s["episodes"]), "samples": int(s["samples"]),
         "tokens": int(s["tokens"]), "zero_adv_frac": s["zero_adv_groups"] / max(1, s["groups"]),
         "groups": int(s["groups"]), "truncated": int(s["truncated"])}
    for role in roles:
        m[f"reward/{role}"] = s[f"reward/{role}"] / max(1, s[f"n/{role}"])
        m[f"cut/{role}"] = s[f"cut/{role}"] / max(1, s[f"n/{role}"])  # share of its responses cut at --max_tokens
    for name, u in updates.items():  # loss, grad norm, logp_gap, skipped steps and the objective's own stats
        m.update({f"{k}/{name}": v for k, v in u.items() if k != "samples"})
        m[f"lr/{name}"] = policies[name].sched.get_last_lr()[0]
    m["logp_gap"] = max(u["logp_gap"] for u in updates.values())
    # what the step learned from (generated: samples, tokens): the equal-budget controls compare both
    m["trained"] = sum(u["trained"] for u in updates.values())
    m["trained_tokens"] = sum(u["trained_tokens"] for u in updates.values())
    return m


def write_samples(out_dir, step, samples, per_role):
    """A few completions per role, so people can read what the agents say. Returns the rows written."""
    by_role, rows = {}, []
    for s in samples:
        by_role.setdefault(s.role, []).append(s)
    for role, ss in by_role.items():
        rows += [{"step": step, "role": role, "key": list(s.key), "reward": s.reward, "advantage": s.advantage,
                  "truncated": s.truncated, "text": s.text} for s in ss[:per_role]]
    append_lines(os.path.join(out_dir, "samples.jsonl"), rows, "samples", step)
    return rows


def log_line(m, roles):
    rewards = " ".join(f"{r} {m[f'reward/{r}']:+.2f}" for r in roles)
    return (f"step {m['step']:4d} | success {m['success']:.3f} | reward {rewards} | zero-adv {m['zero_adv_frac']:.2f}"
            f" | gap {m['logp_gap']:.1e} | tok {m['tokens']} | roll {m['time/rollout']:.1f}s (env {m['time/env']:.1f}s)"
            f" upd {m['time/update']:.1f}s sync {m['time/sync']:.2f}s"
            + (f" | eval {m['eval/success']:.3f}" if "eval/success" in m else ""))


def record_step(args, m, samples, roles, tracker, log):
    """Rank 0: the step's metrics line and sample completions (appended, fsynced), the log line, the tracker."""
    append_lines(os.path.join(args.out_dir, "metrics.jsonl"), [m], "metrics", m["step"])
    rows = write_samples(args.out_dir, m["step"], samples, args.log_samples)
    log(log_line(m, roles))
    if tracker:
        tracker.log(m)
        tracker.samples(m["step"], rows)


def benchmark_line(ev):
    """', pooled over: aime24 0.100 +- 0.055 (30), ...': each benchmark of an evaluation with several."""
    by = (ev or {}).get("by_source") or {}
    return "" if len(by) < 2 else ", pooled over: " + ", ".join(
        f"{src} {b['success']:.3f} +- {b['success_se']:.3f} ({b['n']})" for src, b in by.items())
