"""Read the dynamic loader's tables of many shared libraries into the page cache at once: `python _read_ahead.py
LIB...`, started by checks/_loader_trace.py beside its trace of torch's libraries.

Each library's ELF header and dynamic table are read here (a few kilobytes), and the kernel is asked to read the
other tables the loader reads ahead (checks/_elf.py loader_tables), THREADS files at a time, the last path first.
A node's first run then finds most of them in the page cache when the trace's loader asks, instead of waiting on
the disk once per table, one file after another. Best effort: a file that is not a readable ELF64 library is left
to the trace; the process is killed once the trace is done. Standard library only.
"""
import os
import struct
import sys
import threading

from _elf import loader_tables

THREADS = 16


def read_ahead(paths):
    pending = list(paths)
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                path = pending.pop()
            try:
                tables = loader_tables(path)
                fd = os.open(path, os.O_RDONLY)
                try:
                    for offset, size in tables:
                        os.posix_fadvise(fd, offset, size, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(fd)
            except (OSError, ValueError, struct.error, AttributeError):
                pass

    workers = [threading.Thread(target=worker) for _ in range(min(THREADS, len(pending)))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    read_ahead(sys.argv[1:])
