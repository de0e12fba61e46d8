"""The vectorized element-wise kernels of ddp-worker (trainer/simd.h, trainer/vexp.h), read
off the binary with objdump: each is there in its AVX-512, AVX2 and baseline clone behind a
resolver; no clone contracts a multiply and an add into an FMA (that would round otherwise
than the other clones, and ranks on CPUs of different generations would drift apart: their
replicas must stay bit for bit equal); each clone is vectorized (packed multiplies, zmm
registers in the AVX-512 clone) and calls no libm exp.

    test_simd_clones.py COMPILER_ID BUILD_TYPE    (CMake's, given by tests/trainer.cmake)

Skips, saying so, where the build is not GCC on x86-64 (no clones are made there); checks
the vectorization only in the optimized builds (Release, RelWithDebInfo: -O3), not in the
sanitizers' -O0 one.
"""
import os
import platform
import re
import subprocess
import sys

from worker_util import BIN, Checks

KERNELS = ["gelu_forward", "gelu_backward", "attention_forward", "layernorm_forward",
           "layernorm_backward", "adamw_update"]
CLONES = ["avx512f", "avx2", "default"]
FMA = re.compile(r"\bv?f(n)?m(add|sub)[0-9a-z]*\b")
# libm's exp, by its PLT stub or its own name (not vexpf, a call of its own at -O0)
LIBM_EXP = re.compile(r"<(__)?(expf?|ieee754_expf?)(_[a-z0-9]+)?(@plt)?>")


def bodies(path):
    """{symbol: [instruction lines]} of every function in path's text."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None and line.strip():
            cur.append(line.split(":", 1)[-1].strip())
        elif not line.strip():
            cur = None
    return funcs


def main():
    compiler, build_type = (sys.argv[1:] + ["", ""])[:2]
    if compiler != "GNU" or platform.machine() != "x86_64":
        print("skip: built with %s on %s, not GCC on x86-64: trainer/simd.h makes no clones "
              "there" % (compiler or "an unnamed compiler", platform.machine()))
        return
    optimized = build_type in ("Release", "RelWithDebInfo")
    if not optimized:
        print("note: build type %s is not optimized: the clones and their rounding are "
              "checked, their vectorization is not" % (build_type or "(none)"))
    c = Checks("simd_clones")
    worker = os.path.join(BIN, "ddp-worker")
    c.check("%s is built" % worker, os.path.isfile(worker))
    if not os.path.isfile(worker):
        c.done()
    funcs = bodies(worker)
    for k in KERNELS:
        c.check("%s has a resolver" % k, k + ".resolver" in funcs)
        for cl in CLONES:
            name = "%s.%s" % (k, cl)
            body = funcs.get(name)
            c.check("%s is there" % name, body is not None)
            if body is None:
                continue
            fma = [i for i in body if FMA.search(i.split()[0] if i.split() else "")]
            c.check("%s: no FMA" % name, not fma, "; ".join(fma[:3]))
            if optimized:
                packed = [i for i in body if re.match(r"v?mulps\b", i)]
                c.check("%s: packed multiplies (vectorized)" % name, len(packed) > 0)
                if cl == "avx512f":
                    c.check("%s: 512-bit registers" % name, any("%zmm" in i for i in body))
            calls = [i for i in body if i.startswith("call") and LIBM_EXP.search(i)]
            c.check("%s: no call to libm's exp" % name, not calls, "; ".join(calls[:3]))
    c.done()


if __name__ == "__main__":
    sys.exit(main())
