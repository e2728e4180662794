"""What every peer benchmark script does around CoMLRL: no network, no W&B, and one seed and thread
count for Python, NumPy and torch. The scripts run from this folder, so they import it directly."""
import os
import random


def offline():
    """No Hub, no W&B. Call before transformers, datasets or wandb are imported: they read these once."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ["WANDB_MODE"] = "disabled"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def seed_all(seed, threads):
    """torch's thread count, and the seed of every generator CoMLRL's trainers draw from."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_args(ap, *, epochs, max_new_tokens, num_generations):
    """The options every MAGRPO peer run takes, with the script's own defaults."""
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--num-generations", type=int, default=num_generations)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write a JSON summary here")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
