"""Validation harnesses: the patched layers and the opencl device against torch on the CPU,
at a scale the unit tests do not reach.

    networks   python -m extras.validation.networks (make networks): whole networks forward
               and backward, through the patched layers or on the opencl device
    zoo        the networks it builds: torchvision's and transformer families, seeded weights
"""
# BEGIN STAFF
# opdb        python -m extras.validation.opdb: torch's OpInfo database on the opencl device,
#             each chunk of ops in a child process (opdb_child) that a crash cannot hide in
# opdb_table  the device's table of registrations (docs/device/registrations.md), from a
#             recorded run
# END STAFF
