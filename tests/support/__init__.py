"""What tests and benchmarks share: run-folder builders, loopback servers, fakes of the
systems with no local real part, readiness polling. Test modules import from here, never
from each other."""
