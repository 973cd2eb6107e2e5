"""safeattn's asv benchmark suites (speed, memory, resources, numerics); see run.py."""
