"""`python -m seed`: one seeding (loader.py), what the seed image runs."""
from .loader import run

run()
