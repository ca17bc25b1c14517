"""The system shared-memory registry: regions clients register, as Triton keeps them.

The daemon never maps a client's bytes. It checks a key at registration (the file exists,
``offset + byte_size`` fits), and hands workers a descriptor; the worker maps the region
itself (once, cached) so the model's input array *is* the client's memory and outputs are
written straight into the client's output region. Each registration gets a generation, part
of the name workers cache the mapping under, so a key re-registered after the client
re-created its segment is mapped afresh. A region in use by requests in flight is removed only
when the last of them finishes (Triton's deferred unregister).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from pbd.errors import Code, PbdError, invalid_arg, not_found
from pbd_worker.ipc.shm import SHM_DIR

RESERVED_PREFIX = "triton_python_backend_shm_region_"


@dataclass
class SystemRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    generation: int
    in_use: int = 0
    awaiting_unregister: bool = False

    @property
    def worker_name(self) -> str:
        """What a worker maps: the file name, plus the generation after '#'."""
        return f"{self.key.lstrip('/')}#{self.generation}"


class SystemShmRegistry:
    def __init__(self, *, enabled: bool, key_prefixes: list[str], shm_dir: str = SHM_DIR) -> None:
        self.enabled = enabled
        self.key_prefixes = [p.lstrip("/") for p in key_prefixes]
        self.shm_dir = shm_dir
        self.regions: dict[str, SystemRegion] = {}
        self._generations = itertools.count(1)

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise PbdError(
                Code.UNSUPPORTED,
                "Client shared memory is disabled. Start the server with "
                "'--allow-client-shm=true' to enable.",
            )

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_enabled()
        bare = key.lstrip("/")
        if not bare or "/" in bare or bare.startswith(RESERVED_PREFIX) or "#" in bare:
            raise invalid_arg(
                f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
            )
        if self.key_prefixes and not any(bare.startswith(p) for p in self.key_prefixes):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' - shm key '{key}' is not allowed "
                f"(--client-shm-key-prefix allows: {', '.join(self.key_prefixes)})"
            )
        if name in self.regions:
            raise PbdError(Code.ALREADY_EXISTS, f"shared memory region '{name}' already in manager")
        try:
            size = os.stat(os.path.join(self.shm_dir, bare)).st_size
        except OSError:
            raise PbdError(Code.INTERNAL, f"Unable to open shared memory region: '{key}'") from None
        if offset + byte_size > size:
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        self.regions[name] = SystemRegion(name, key, offset, byte_size, next(self._generations))

    def status(self, name: str) -> list[SystemRegion]:
        self._check_enabled()
        if not name:
            return list(self.regions.values())
        region = self.regions.get(name)
        if region is None:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        return [region]

    def unregister(self, name: str) -> None:
        self._check_enabled()
        for region in [r for r in self.regions.values() if not name or r.name == name]:
            if region.in_use:
                region.awaiting_unregister = True
            else:
                del self.regions[region.name]

    def acquire(self, name: str, offset: int, byte_size: int) -> tuple[SystemRegion, int]:
        """The region and the file offset of ``[offset, offset + byte_size)`` inside it; the
        region stays registered until :meth:`release`."""
        self._check_enabled()
        region = self.regions.get(name)
        if region is None or region.awaiting_unregister:
            raise not_found(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or offset >= region.byte_size:
            raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
        if byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        region.in_use += 1
        return region, region.offset + offset

    def release(self, region: SystemRegion) -> None:
        region.in_use -= 1
        if region.in_use == 0 and region.awaiting_unregister:
            self.regions.pop(region.name, None)
