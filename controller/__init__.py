# Before any compiled kernel of this package can load: drop numba's stale kernel caches
# (dynamics/_kernel_cache.py; importing dynamics already runs it, once per process).
from dynamics._kernel_cache import guard as _guard_kernel_caches

_guard_kernel_caches()
