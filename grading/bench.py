"""The old name of the layer benchmark: `python -m grading.bench` runs bench.layers."""
from bench.layers import main

if __name__ == "__main__":
    main()
