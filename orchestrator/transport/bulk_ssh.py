"""The SSH options of the node-to-node bulk hops: `model pull`'s blob copy and the direct image copy.

These hops move GBs through one SSH stream each, and the cipher is most of their CPU. OpenSSH prefers
chacha20-poly1305, which no CPU accelerates; AES-GCM runs on AES instructions (x86 AES-NI, the Armv8
crypto extensions of a Spark's Grace cores). Measured on this project's 2-core x86 machine, node to node
over the simulated fabric, 1 GB `ssh cat > /dev/null`: chacha20-poly1305 ~290 MB/s, aes128-gcm ~440 MB/s,
aes256-gcm ~430, aes128-ctr ~255 (docs/performance.md, section 9). `-c` takes a preference list, so a
node whose sshd does not offer AES-GCM still agrees on chacha20 or AES-CTR; the list names every cipher
a current OpenSSH enables by default, so it refuses no peer the default would have reached.
"""

from __future__ import annotations

import shlex

BULK_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                "aes128-ctr", "aes192-ctr", "aes256-ctr")

# For a bash script: the options every bulk hop adds to its `ssh` (no compression: the bytes are weights
# and layer tars, and the link is faster than any compressor).
BULK_SSH_OPTS = f"-o Compression=no -c {shlex.quote(','.join(BULK_CIPHERS))}"
