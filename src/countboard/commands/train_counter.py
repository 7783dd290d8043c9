"""``countboard train-counter``: train shapecount on synthetic shapes and log the checkpoint to MLflow."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from countboard.commands import store_argument
from countboard.counting.models.shapecount_recipes import RECIPES, TRAIN_EPOCHS, local_checkpoint_path


def run(args: argparse.Namespace) -> int:
    from countboard.counting.models.shapecount_train import TrainConfig, train_recipes, trained_before  # torch
    from countboard.tracking.address import resolve
    from countboard.tracking.trained import log_checkpoint

    data_dir = Path(args.data_dir or os.environ.get("COUNTBOARD_DATA_DIR", "data"))
    dataset_root = Path(args.dataset_root) if args.dataset_root else data_dir / "synthetic_shapes"
    recipes = list(RECIPES) if args.recipe == "both" else [args.recipe]
    todo, kept = [], {}
    for recipe in recipes:
        cfg = TrainConfig(recipe=recipe, epochs=args.epochs, seed=args.seed, threads=args.threads)
        out = local_checkpoint_path(data_dir, recipe)
        info = None if args.retrain else trained_before(dataset_root, cfg, out)
        if info is not None:
            kept[recipe] = (out, info)
            print(f"shapecount_{recipe}: {out} was trained with these settings on this data (loss "
                  f"{info['final_loss']:.4f}); kept (--retrain trains it again)")
        else:
            todo.append((cfg, out))
    trained = dict(zip([cfg.recipe for cfg, _ in todo], train_recipes(dataset_root, todo, args.jobs), strict=True))
    for recipe in recipes:
        if recipe in trained:
            path, info = trained[recipe]
            print(f"shapecount_{recipe}: {path} (loss {info['final_loss']:.4f}, {info['train_seconds']:.0f} s "
                  f"wall, {info['train_cpu_seconds']:.0f} s CPU, {info['n_train_images']} images)")
        else:
            path, info = kept[recipe]
        if not args.no_mlflow:
            run_id = log_checkpoint(path, f"shapecount_{recipe}", info, args.store, force=args.force)
            where = resolve(args.store).uri
            print(f"  logged to {where} as run {run_id}" if run_id else
                  f"  a run with the same settings is already logged in {where} (pass --force to log again)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``countboard train-counter``: train shapecount on synthetic shapes and log the checkpoint to MLflow."""
    p = sub.add_parser("train-counter", help="train the shapecount counter on synthetic shapes (naive/aware)")
    p.add_argument("--recipe", choices=[*RECIPES, "both"], default="both")
    p.add_argument("--data-dir", default=None,
                   help="data root (default $COUNTBOARD_DATA_DIR or ./data); the checkpoint goes to "
                        "<data-dir>/checkpoints/shapecount_<recipe>.pt")
    p.add_argument("--dataset-root", default=None,
                   help="synthetic_shapes root (default <data-dir>/synthetic_shapes; generated when absent)")
    p.add_argument("--epochs", type=int, default=TRAIN_EPOCHS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads of each training")
    p.add_argument("--jobs", type=int, default=2,
                   help="recipes trained at the same time, one process each (--recipe both)")
    store_argument(p, creates=True)
    p.add_argument("--no-mlflow", action="store_true", help="only write the local checkpoint")
    p.add_argument("--force", action="store_true", help="log a new run even if identical settings were logged")
    p.add_argument("--retrain", action="store_true",
                   help="train even if the checkpoint was trained with the same settings on the same data")
    p.set_defaults(func=run)
