"""The client shared-memory registry: system and CUDA regions clients register, as Triton
keeps them (one namespace for both kinds).

The daemon never maps a client's bytes. It checks a key at registration (the file exists,
``offset + byte_size`` fits), and hands workers a descriptor; the worker maps the region
itself (once, cached) so the model's input array *is* the client's memory and outputs are
written straight into the client's output region. Each registration gets a generation, part
of the name workers cache the mapping under, so a key re-registered after the client
re-created its segment is mapped afresh. A region in use by requests in flight is removed only
when the last of them finishes (Triton's deferred unregister).

CUDA regions are the same, with a ``cudaIpcMemHandle_t`` for a key: the daemon opens it once to
check it (:mod:`pbd.memory.cuda`) and the worker opens it again to use it. When a CUDA region
is finally removed, ``on_cuda_removed`` tells the workers to close their mappings.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pbd.errors import Code, PbdError, invalid_arg, not_found
from pbd.memory.cuda import IPC_HANDLE_SIZE, CudaIpc, CudaUnavailable
from pbd_wire.client_region import (
    RegionIdentity,
    RegionRefused,
    check_file_name,
    open_region,
)
from pbd_wire.shm import SHM_DIR

log = logging.getLogger("pbd.memory")

RESERVED_PREFIX = "triton_python_backend_shm_region_"


@dataclass
class SystemRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    identity: RegionIdentity
    in_use: int = 0
    awaiting_unregister: bool = False

    @property
    def worker_name(self) -> str:
        """What a worker maps: the file, this registration, and the file's identity."""
        return self.identity.worker_name


@dataclass
class CudaRegion:
    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int
    generation: int
    pointer: int  # the daemon's own opening of the handle, closed when the region goes
    in_use: int = 0
    awaiting_unregister: bool = False


Region = SystemRegion | CudaRegion


class ClientShmRegistry:
    def __init__(
        self,
        *,
        enabled: bool,
        key_prefixes: list[str],
        shm_dir: str = SHM_DIR,
        gpus: list[int] | None = None,
        on_cuda_removed: Callable[[CudaRegion], None] = lambda region: None,
    ) -> None:
        self.enabled = enabled
        self.key_prefixes = [p.lstrip("/") for p in key_prefixes]
        self.shm_dir = shm_dir
        self.gpus = list(gpus or [])
        self.regions: dict[str, Region] = {}
        self._generations = itertools.count(1)
        self._cuda = CudaIpc()
        self.on_cuda_removed = on_cuda_removed

    def system_regions(self) -> list[SystemRegion]:
        return [r for r in self.regions.values() if isinstance(r, SystemRegion)]

    def cuda_regions(self) -> list[CudaRegion]:
        return [r for r in self.regions.values() if isinstance(r, CudaRegion)]

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise PbdError(
                Code.UNSUPPORTED,
                "Client shared memory is disabled. Start the server with "
                "'--allow-client-shm=true' to enable.",
            )

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``key`` (a file in the shm directory) after checking it as
        :mod:`pbd_wire.client_region` says: the client's own regular file, owned by the
        daemon's uid, never a link. (pbd's own segments are memfds, in no directory: a key
        cannot name one.)"""
        self._check_enabled()
        bare = key.lstrip("/")
        try:
            check_file_name(bare)
        except RegionRefused:
            bare = ""
        if not bare or bare.startswith(RESERVED_PREFIX):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
            )
        if self.key_prefixes and not any(bare.startswith(p) for p in self.key_prefixes):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' - shm key '{key}' is not allowed "
                f"(--client-shm-key-prefix allows: {', '.join(self.key_prefixes)})"
            )
        if offset < 0 or byte_size < 0:
            field = "offset" if offset < 0 else "byte_size"
            raise invalid_arg(
                f"failed to register shared memory region '{name}': invalid args ({field} "
                "must not be negative)"
            )
        if name in self.regions:
            raise PbdError(Code.ALREADY_EXISTS, f"shared memory region '{name}' already in manager")
        try:
            fd, st = open_region(self.shm_dir, bare, owner_uid=os.geteuid())
        except RegionRefused as exc:
            raise PbdError(
                Code.INTERNAL, f"Unable to open shared memory region: '{key}' ({exc})"
            ) from None
        os.close(fd)
        if offset + byte_size > st.st_size:
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        identity = RegionIdentity(bare, next(self._generations), st.st_dev, st.st_ino)
        self.regions[name] = SystemRegion(name, key, offset, byte_size, identity)

    def status(self, name: str) -> list[SystemRegion]:
        return self._status(name, SystemRegion)

    def _status(self, name: str, kind: type[Region]) -> list[Any]:
        """Regions of ``kind`` (all of them for ``name`` ""), with Triton's errors for an
        unknown name and for a name of the other kind."""
        self._check_enabled()
        if not name:
            return [r for r in self.regions.values() if isinstance(r, kind)]
        region = self.regions.get(name)
        this, other = ("system", "CUDA") if kind is SystemRegion else ("CUDA", "system")
        if region is None:
            raise not_found(f"Unable to find {this.lower()} shared memory region: '{name}'")
        if not isinstance(region, kind):
            raise not_found(
                f"The region named '{name}' is registered as {other} shared memory, not {this} "
                "shared memory"
            )
        return [region]

    def unregister(self, name: str, *, held: bool = False) -> list[SystemRegion]:
        """System regions only: an unknown name, or a CUDA region's, is not an error. With
        ``held``, each region unregistered now stays (its name taken, as while requests use
        it) until released once more: the returned ones, for the caller to ``release`` when
        what else may use them (front ends) let go."""
        self._check_enabled()
        named = [r for r in self.system_regions() if not name or r.name == name]
        going = [r for r in named if not r.awaiting_unregister] if held else []
        for region in going:
            region.in_use += 1
        self._unregister(named)
        return going

    def _unregister(self, regions: list[SystemRegion] | list[CudaRegion]) -> None:
        for region in regions:
            if region.in_use:
                region.awaiting_unregister = True
            else:
                self._remove(region)

    def _remove(self, region: Region) -> None:
        self.regions.pop(region.name, None)
        if isinstance(region, CudaRegion):
            try:
                self._cuda.close(region.pointer, region.device_id)
            except Exception as exc:  # noqa: BLE001 - the region is gone either way
                log.warning("closing CUDA region %r: %s", region.name, exc)
            self.on_cuda_removed(region)

    # -- CUDA regions --------------------------------------------------------------------------

    async def register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self._check_enabled()
        if not self.gpus:
            raise invalid_arg(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
            )
        if name in self.regions:
            raise PbdError(Code.ALREADY_EXISTS, f"shared memory region '{name}' already in manager")
        if len(raw_handle) != IPC_HANDLE_SIZE:
            raise invalid_arg(
                "failed to register shared memory region: invalid args (raw_handle has "
                f"{len(raw_handle)} bytes, a cudaIpcMemHandle_t has {IPC_HANDLE_SIZE})"
            )
        if device_id not in self.gpus:
            raise invalid_arg(
                f"failed to register shared memory region: invalid args (device_id {device_id}: "
                f"the GPUs this daemon sees are {self.gpus})"
            )
        try:
            pointer, available = await asyncio.to_thread(self._cuda.open, raw_handle, device_id)
        except CudaUnavailable as exc:
            raise PbdError(Code.UNSUPPORTED, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - CUDA's refusal of the handle
            log.warning("CUDA shared memory region %r: cannot open its handle: %s", name, exc)
            raise invalid_arg(
                f"failed to register shared memory region: invalid args ({exc})"
            ) from None
        if byte_size > available or name in self.regions:
            self._cuda.close(pointer, device_id)
            if name in self.regions:  # registered by a concurrent call while we opened
                raise PbdError(
                    Code.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
                )
            raise invalid_arg(
                f"failed to register shared memory region '{name}': invalid args (byte_size "
                f"{byte_size} exceeds the {available} bytes of the allocation)"
            )
        self.regions[name] = CudaRegion(
            name, bytes(raw_handle), device_id, byte_size, next(self._generations), pointer
        )

    def status_cuda(self, name: str) -> list[CudaRegion]:
        return self._status(name, CudaRegion)

    def unregister_cuda(self, name: str) -> None:
        self._check_enabled()
        self._unregister([r for r in self.cuda_regions() if not name or r.name == name])

    # -- use by requests -----------------------------------------------------------------------

    def acquire(self, name: str, offset: int, byte_size: int) -> tuple[Region, int]:
        """The region and the offset of ``[offset, offset + byte_size)``: from the start of the
        file for a system region, of the allocation for a CUDA one; the region stays registered
        until :meth:`release`."""
        self._check_enabled()
        region = self.regions.get(name)
        if region is None or region.awaiting_unregister:
            raise not_found(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or offset >= region.byte_size:
            raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
        if byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        region.in_use += 1
        return region, (region.offset if isinstance(region, SystemRegion) else 0) + offset

    def release(self, region: Region) -> None:
        region.in_use -= 1
        if region.in_use == 0 and region.awaiting_unregister:
            self._remove(region)

    def close(self) -> None:
        """The daemon stops: close its openings of CUDA handles."""
        for region in self.cuda_regions():
            self.regions.pop(region.name, None)
            try:
                self._cuda.close(region.pointer, region.device_id)
            except Exception:  # noqa: BLE001 - shutting down
                pass
