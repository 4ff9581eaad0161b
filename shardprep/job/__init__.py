"""The job: frozen plan (job.json) -> tasks -> sidecars -> finalize/verify; what every executor runs."""
