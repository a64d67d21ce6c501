"""Swaps a model folder for another while evaluate-model loads it: waits until the base's pin has read the folder's
last file (tokenizer_config.json closed), renames FOLDER away and SWAP in its place, waits until the loader has
read SWAP's model.safetensors, then puts FOLDER back.
usage: swap_racer.py FOLDER SWAP LOG [HOLD_S: seconds after that read before the swap back, default 3]
"""
import ctypes, os, struct, sys, time
folder, swap, logp = sys.argv[1:4]
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
log = open(logp, "a", buffering=1)
libc = ctypes.CDLL("libc.so.6", use_errno=True)
IN_CLOSE_NOWRITE = 0x10


def wait_close(directory, name):
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, directory.encode(), IN_CLOSE_NOWRITE)
    while True:
        buf, at = os.read(fd, 65536), 0
        while at < len(buf):
            wd, mask, cookie, ln = struct.unpack_from("iIII", buf, at)
            got = buf[at + 16: at + 16 + ln].rstrip(b"\0").decode()
            at += 16 + ln
            if got == name:
                os.close(fd)
                return


wait_close(folder, "tokenizer_config.json")
os.rename(folder, folder + ".held"); os.rename(swap, folder)
log.write(f"{time.time():.4f} swapped {swap} in after the pin's read\n")
wait_close(folder, "model.safetensors")
time.sleep(hold)
os.rename(folder, swap); os.rename(folder + ".held", folder)
log.write(f"{time.time():.4f} put the reviewed folder back after the load\n")
