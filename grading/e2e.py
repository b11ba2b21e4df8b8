"""The old name of the whole-model benchmark: `python -m grading.e2e` runs bench.models."""
from bench.models import main

if __name__ == "__main__":
    main()
