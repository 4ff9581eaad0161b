"""shardprep: raw text -> tokenized WebDataset shards (Slurm job arrays) -> PyTorch DDP batches.

Heavy modules (torch, boto3, transformers) are imported where used, so ``import shardprep`` stays cheap
on login nodes and inside array tasks.
"""

__version__ = "0.1.0"
