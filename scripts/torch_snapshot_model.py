"""PyTorch's native CUDA caching allocator, ported to Python from its source for one purpose:
building memory-snapshot fixtures without a GPU whose segment decisions follow PyTorch's rules.

Ported from c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator: malloc,
get_free_block, alloc_block, release_available_cached_blocks, release_cached_blocks,
release_blocks, release_block, free, free_block, try_merge_blocks, should_split,
alloc_found_block, insert_events, process_events, synchronize_and_free_events, and the
expandable-segment functions find_expandable_block, map_block,
try_allocate_expandable_block, unmap_block, release_expandable_segment), and from
torch/csrc/cuda/Module.cpp (THCPModule_memorySnapshot: the dict, key order, shared frame
dicts, a fresh (0, 0) tuple and "N/A" string per entry). It is written from PyTorch's code,
not from headroom's model, so the fixtures check one against the other.

The device is a capacity in bytes; cudaMalloc and page mapping fail past it. Stream work is
explicit: events recorded on a stream complete when the workload calls stream_done().
"""

import bisect

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20
K_LARGE_BUFFER = 20 << 20
SIZE_MAX = (1 << 64) - 1


class OutOfMemory(Exception):
    pass


class Block:
    __slots__ = ("stream", "size", "ptr", "pool", "allocated", "mapped", "prev", "next",
                 "event_count", "stream_uses", "requested_size", "es", "ctx", "seg_ctx")

    def __init__(self, stream, size, pool, ptr):
        self.stream, self.size, self.pool, self.ptr = stream, size, pool, ptr
        self.allocated = False
        self.mapped = True
        self.prev = self.next = None
        self.event_count = 0
        self.stream_uses = set()
        self.requested_size = 0
        self.es = None
        self.ctx = None
        self.seg_ctx = None

    def is_split(self):
        return self.prev is not None or self.next is not None


class SortedBlocks:
    """A std::set<Block*> with a key function."""

    def __init__(self, key):
        self.key, self.keys, self.items = key, [], []

    def insert(self, b):
        k = self.key(b)
        i = bisect.bisect_left(self.keys, k)
        assert i == len(self.keys) or self.keys[i] != k, "block already in the pool"
        self.keys.insert(i, k)
        self.items.insert(i, b)

    def erase(self, b):
        k = self.key(b)
        i = bisect.bisect_left(self.keys, k)
        if i < len(self.keys) and self.keys[i] == k:
            del self.keys[i]
            del self.items[i]
            return 1
        return 0

    def lower_bound(self, k):
        return bisect.bisect_left(self.keys, k)


class BlockPool:
    def __init__(self, small):
        self.is_small = small
        # BlockComparatorSize: (stream, size, ptr); BlockComparatorAddress: (stream, ptr).
        self.blocks = SortedBlocks(lambda b: (b.stream, b.size, b.ptr))
        self.unmapped = SortedBlocks(lambda b: (b.stream, b.ptr))


class Device:
    """cudaMalloc's address space. With reuse, a freed range is handed out again, lowest
    address first, as a driver does: after empty_cache a new segment can land below older
    ones (which is where best fit's ties by address matter)."""

    def __init__(self, capacity, base, reuse=False):
        self.capacity, self.used, self.next_va = capacity, 0, base
        self.live = {}
        self.reuse = reuse
        self.holes = []  # (ptr, size), sorted by ptr, coalesced

    def malloc(self, size):
        if self.used + size > self.capacity:
            return None
        ptr = None
        if self.reuse:
            for i, (p, n) in enumerate(self.holes):
                if n >= size:
                    ptr = p
                    if n == size:
                        del self.holes[i]
                    else:
                        self.holes[i] = (p + size, n - size)
                    break
        if ptr is None:
            ptr = self.next_va
            self.next_va += size
        self.used += size
        self.live[ptr] = size
        return ptr

    def free(self, ptr):
        size = self.live.pop(ptr)
        self.used -= size
        if self.reuse:
            i = bisect.bisect_left(self.holes, (ptr, 0))
            self.holes.insert(i, (ptr, size))
            # Coalesce with the neighbours.
            if i + 1 < len(self.holes) and ptr + size == self.holes[i + 1][0]:
                self.holes[i] = (ptr, size + self.holes[i + 1][1])
                del self.holes[i + 1]
            if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == ptr:
                self.holes[i - 1] = (self.holes[i - 1][0], self.holes[i - 1][1] + self.holes[i][1])
                del self.holes[i]

    def reserve(self, size):
        ptr = self.next_va
        self.next_va += size
        return ptr

    def free_bytes(self):
        return self.capacity - self.used


class ExpandableSegment:
    def __init__(self, dev, stream, segment_size):
        self.dev, self.stream, self.segment_size = dev, stream, segment_size
        total = dev.capacity
        self.max_handles = -(-(total + total // 8) // segment_size)
        self.base = dev.reserve(self.max_handles * segment_size)
        self.handles = [False] * self.max_handles

    def size(self):
        return self.max_handles * self.segment_size

    def map(self, ptr, size):
        begin = (ptr - self.base) // self.segment_size
        end = -(-(ptr + size - self.base) // self.segment_size)
        for i in range(begin, end):
            assert not self.handles[i]
            if self.dev.used + self.segment_size > self.dev.capacity:
                for j in range(begin, i):
                    self.handles[j] = False
                    self.dev.used -= self.segment_size
                return (None, 0)
            self.handles[i] = True
            self.dev.used += self.segment_size
        return (self.base + begin * self.segment_size, (end - begin) * self.segment_size)

    def unmap(self, ptr, size):
        begin = -(-(ptr - self.base) // self.segment_size)
        end = (ptr + size - self.base) // self.segment_size
        if begin >= end:
            return (ptr, 0)
        for i in range(begin, end):
            assert self.handles[i]
            self.handles[i] = False
            self.dev.used -= self.segment_size
        return (self.base + begin * self.segment_size, (end - begin) * self.segment_size)


class Allocator:
    """DeviceCachingAllocator for one device, recording every TraceEntry."""

    def __init__(self, device_index, capacity, base, clock, max_split_mb=None,
                 expandable=False, record=True, reuse_addresses=False):
        self.device = device_index
        self.dev = Device(capacity, base, reuse=reuse_addresses)
        self.clock = clock
        self.max_split = SIZE_MAX if max_split_mb is None else max_split_mb << 20
        self.max_non_split_rounding = K_LARGE_BUFFER
        self.expandable = expandable
        self.large = BlockPool(False)
        self.small = BlockPool(True)
        self.active = set()
        self.events = {}  # stream -> list of [done, block]
        self.expandable_segments = []
        self.total_allocated_memory = 0
        self.record = record
        self.trace = []
        self.num_alloc_retries = 0

    # -- trace ---------------------------------------------------------------------------
    def record_trace(self, action, addr, size, stream, ctx):
        if self.record:
            self.trace.append((action, addr, size, stream, self.clock.now(), ctx))

    # -- sizes ---------------------------------------------------------------------------
    @staticmethod
    def round_size(size):
        if size < K_MIN_BLOCK:
            return K_MIN_BLOCK
        return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)

    @staticmethod
    def get_allocation_size(size):
        if size <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if size < K_MIN_LARGE_ALLOC:
            return K_LARGE_BUFFER
        return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)

    def get_pool(self, size):
        return self.small if size <= K_SMALL_SIZE else self.large

    def should_split(self, block, size):
        remaining = block.size - size
        if block.pool.is_small or self.expandable:
            return remaining >= K_MIN_BLOCK
        return size < self.max_split and remaining > K_SMALL_SIZE

    # -- malloc --------------------------------------------------------------------------
    def malloc(self, orig_size, stream, ctx):
        self.process_events(ctx)
        size = self.round_size(orig_size)
        pool = self.get_pool(size)
        alloc_size = self.get_allocation_size(size)
        p = {"size": size, "stream": stream, "pool": pool, "alloc_size": alloc_size,
             "block": None}
        found = self.get_free_block(p)
        if not found:
            found = (self.alloc_block(p, False, ctx)
                     or (self.release_available_cached_blocks(p, ctx)
                         and self.alloc_block(p, False, ctx))
                     or (self.release_cached_blocks(ctx) and self.alloc_block(p, True, ctx)))
        if not found:
            self.record_trace("oom", self.dev.free_bytes(), size, stream, ctx)
            raise OutOfMemory(size)
        return self.alloc_found_block(p, orig_size, ctx, self.should_split(p["block"], size))

    def get_free_block(self, p):
        pool, stream, size = p["pool"], p["stream"], p["size"]
        items = pool.blocks.items
        i = pool.blocks.lower_bound((stream, size, 0))
        if i == len(items) or items[i].stream != stream:
            return False
        if items[i].es is not None:
            if self.expandable:
                def exp_size(b):
                    return b.size + (b.next.size if b.next is not None and not b.next.mapped
                                     else 0)
                j = i + 1
                while (items[i].es is not None and j < len(items) and items[j].stream == stream
                       and exp_size(items[j]) < exp_size(items[i])):
                    i = j
                    j += 1
            else:
                i += 1
                while i < len(items) and items[i].es is not None and items[i].stream == stream:
                    i += 1
                if i == len(items) or items[i].stream != stream:
                    return False
        b = items[i]
        if size < self.max_split and b.size >= self.max_split:
            return False
        if size >= self.max_split and b.size >= size + self.max_non_split_rounding:
            return False
        p["block"] = b
        pool.blocks.erase(b)
        return True

    def alloc_block(self, p, is_retry, ctx):
        size = p["alloc_size"]
        if is_retry:
            self.num_alloc_retries += 1
        if self.expandable:
            p["block"] = self.try_allocate_expandable_block(p["stream"], p["pool"], p["size"],
                                                            ctx)
            return p["block"] is not None
        ptr = self.dev.malloc(size)
        if ptr is None:
            return False
        self.total_allocated_memory += size
        b = Block(p["stream"], size, p["pool"], ptr)
        p["block"] = b
        self.record_trace("segment_alloc", ptr, size, p["stream"], ctx)
        b.seg_ctx = ctx
        return True

    def release_available_cached_blocks(self, p, ctx):
        if self.max_split == SIZE_MAX:
            return False
        pool = p["pool"]
        key_size = max(p["size"], self.max_split)
        items = pool.blocks.items
        i = pool.blocks.lower_bound((p["stream"], key_size, 0))
        if i == len(items) or items[i].stream != p["stream"] or items[i].es is not None:
            if i == 0:
                return False
            total = 0
            i -= 1
            while (total < key_size and items[i].size >= self.max_split
                   and items[i].stream == p["stream"]):
                cur = items[i]
                is_first = i == 0
                if not is_first:
                    i -= 1
                if cur.es is None:
                    total += cur.size
                    self.release_block(cur, ctx)
                if is_first:
                    break
            if total < key_size:
                return False
        else:
            self.release_block(items[i], ctx)
        return True

    def release_cached_blocks(self, ctx):
        self.synchronize_and_free_events(ctx)
        self.release_blocks(self.large, ctx)
        self.release_blocks(self.small, ctx)
        return True

    def release_blocks(self, pool, ctx):
        to_unmap = []
        for b in list(pool.blocks.items):
            if b.es is not None:
                to_unmap.append(b)
            elif b.prev is None and b.next is None:
                self.release_block(b, ctx)
        for b in to_unmap:
            self.unmap_block(b, ctx)
            if b.prev is None and b.next is None:
                self.release_expandable_segment(b)

    def release_block(self, b, ctx):
        self.record_trace("segment_free", b.ptr, b.size, b.stream, ctx or b.seg_ctx)
        self.dev.free(b.ptr)
        self.total_allocated_memory -= b.size
        b.pool.blocks.erase(b)

    def alloc_found_block(self, p, orig_size, ctx, split):
        size, pool, stream = p["size"], p["pool"], p["stream"]
        block = p["block"]
        if split:
            remaining = block
            block = Block(stream, size, pool, remaining.ptr)
            block.es = remaining.es
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            pool.blocks.insert(remaining)
        block.allocated = True
        block.requested_size = orig_size
        block.ctx = ctx
        self.record_trace("alloc", block.ptr, orig_size, block.stream, ctx)
        self.active.add(block)
        return block

    # -- free ----------------------------------------------------------------------------
    def free(self, block, ctx):
        block.allocated = False
        self.record_trace("free_requested", block.ptr, block.requested_size, block.stream,
                          ctx or block.ctx)
        if block.stream_uses:
            self.insert_events(block)
        else:
            self.free_block(block, ctx)

    def record_stream(self, block, stream):
        if stream != block.stream:
            block.stream_uses.add(stream)

    def free_block(self, block, ctx):
        assert not block.allocated and block.event_count == 0 and not block.stream_uses
        self.record_trace("free_completed", block.ptr, block.requested_size, block.stream,
                          ctx or block.ctx)
        block.ctx = None
        pool = block.pool
        for cand in (block.prev, block.next):
            self.try_merge_blocks(block, cand, pool)
        self.active.discard(block)
        pool.blocks.insert(block)

    def try_merge_blocks(self, dst, src, pool):
        if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
                or dst.mapped != src.mapped):
            return 0
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            dst.seg_ctx = src.seg_ctx
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        if src.mapped:
            pool.blocks.erase(src)
        else:
            pool.unmapped.erase(src)
        return src.size

    # -- events --------------------------------------------------------------------------
    def insert_events(self, block):
        streams = sorted(block.stream_uses)
        block.stream_uses = set()
        for s in streams:
            block.event_count += 1
            self.events.setdefault(s, []).append([False, block])

    def stream_done(self, stream):
        """The GPU has finished everything queued on `stream` so far."""
        for e in self.events.get(stream, []):
            e[0] = True

    def process_events(self, ctx):
        for s in list(self.events):
            q = self.events[s]
            while q and q[0][0]:
                _, block = q.pop(0)
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, ctx)
            if not q:
                del self.events[s]

    def synchronize_and_free_events(self, ctx):
        for s in list(self.events):
            for _, block in self.events[s]:
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, ctx)
        self.events = {}

    def empty_cache(self, ctx):
        self.release_cached_blocks(ctx)

    # -- expandable segments --------------------------------------------------------------
    def find_expandable_block(self, stream, pool, size):
        def allocatable(b):
            return (b is not None and not b.allocated and b.event_count == 0
                    and not b.stream_uses)

        def has_space(b):
            n = 0
            while n < size and allocatable(b):
                n += b.size
                b = b.next
            return n >= size

        items = pool.unmapped.items
        i = pool.unmapped.lower_bound((stream, 0))
        while i < len(items) and items[i].stream == stream:
            c = items[i]
            if allocatable(c.prev):
                c = c.prev
            if has_space(c):
                return c
            i += 1
        seg = ExpandableSegment(self.dev, stream,
                                K_SMALL_BUFFER if pool.is_small else K_LARGE_BUFFER)
        self.expandable_segments.append(seg)
        c = Block(stream, seg.size(), pool, seg.base)
        c.mapped = False
        c.es = seg
        pool.unmapped.insert(c)
        return c

    def map_block(self, to_map, size, ctx):
        ptr, mapped = to_map.es.map(to_map.ptr, size)
        if mapped == 0:
            return False
        pool = to_map.pool
        pool.unmapped.erase(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rem = Block(to_map.stream, to_map.size - mapped, pool, to_map.ptr + mapped)
            rem.mapped = False
            rem.es = to_map.es
            rem.prev, rem.next = to_map, to_map.next
            if to_map.next is not None:
                to_map.next.prev = rem
            to_map.next = rem
            pool.unmapped.insert(rem)
            to_map.size = mapped
        self.try_merge_blocks(to_map, to_map.prev, pool)
        self.try_merge_blocks(to_map, to_map.next, pool)
        pool.blocks.insert(to_map)
        self.total_allocated_memory += mapped
        self.record_trace("segment_map", ptr, mapped, to_map.stream, ctx)
        return True

    def try_allocate_expandable_block(self, stream, pool, size, ctx):
        c = self.find_expandable_block(stream, pool, size)
        if not c.mapped and not self.map_block(c, min(c.size, size), ctx):
            return None
        while c.size < size:
            nxt = c.next
            if not self.map_block(nxt, min(size - c.size, nxt.size), ctx):
                return None
            c = nxt
        pool.blocks.erase(c)
        return c

    def unmap_block(self, b, ctx):
        ptr, n = b.es.unmap(b.ptr, b.size)
        if n == 0:
            return
        pool = b.pool
        pool.blocks.erase(b)
        before = ptr - b.ptr
        if before > 0:
            bf = Block(b.stream, before, pool, b.ptr)
            bf.es = b.es
            bf.prev, bf.next = b.prev, b
            if b.prev is not None:
                b.prev.next = bf
            b.prev = bf
            pool.blocks.insert(bf)
        after = b.size - (before + n)
        if after > 0:
            af = Block(b.stream, after, pool, ptr + n)
            af.es = b.es
            af.prev, af.next = b, b.next
            if b.next is not None:
                b.next.prev = af
            b.next = af
            pool.blocks.insert(af)
        b.ptr, b.size, b.mapped = ptr, n, False
        self.try_merge_blocks(b, b.prev, pool)
        self.try_merge_blocks(b, b.next, pool)
        pool.unmapped.insert(b)
        self.total_allocated_memory -= n
        self.record_trace("segment_unmap", ptr, n, b.stream, ctx)

    def release_expandable_segment(self, b):
        assert b.size == b.es.size() and not b.mapped
        self.expandable_segments.remove(b.es)
        b.pool.unmapped.erase(b)

    # -- state ---------------------------------------------------------------------------
    def reserved(self):
        return self.total_allocated_memory

    def segments(self):
        """Heads of mapped ranges with their blocks, by address (`snapshot()`)."""
        heads = set()
        for b in list(self.active) + self.large.blocks.items + self.small.blocks.items:
            while b.prev is not None and b.prev.mapped:
                b = b.prev
            heads.add(b)
        out = []
        for h in sorted(heads, key=lambda b: b.ptr):
            blocks = []
            b = h
            while b is not None and b.mapped:
                blocks.append(b)
                b = b.next
            out.append((h, blocks))
        return out
