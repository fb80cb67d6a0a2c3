"""DVC stage entry points: one thin script per stage, run as `python -m stages.<name>`."""
