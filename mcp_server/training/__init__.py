"""Environment check, launch, progress callback, status, stop/resume, triage."""
