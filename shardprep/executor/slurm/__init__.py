"""Slurm executors (sbatch arrays, submitit) and their support: options, templates, commands, job records, status."""
