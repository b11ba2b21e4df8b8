"""The old name of the network validation: `python -m extras.validate_networks` runs
extras.validation.networks (make networks)."""
import sys

from extras.validation.networks import main

if __name__ == "__main__":
    sys.exit(main())
