"""cmake --install for real, into a temporary prefix, and what a user of the package does with
it: a C program built against `pkg-config --cflags --libs ddp` (shared) and `pkg-config
--static` (static libddp.a) that calls libddp (rng.h, ckpt.h and common/err.h through them),
run; the man pages rendered without a warning (man -l, else groff), each naming every flag
its program's --help (and ddpctl's commands' --help) names; the bash completion
loaded (and zsh's, where zsh is installed); every installed binary's --version; the systemd
units naming the installed daemons; the binaries' RUNPATH reaching the installed lib folder
(where the optional GPU libraries go)."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("DDP_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("DDP_BUILD") or os.path.join(SRC, "build")

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>

#include "ddp/ckpt.h"
#include "ddp/rng.h"

int main(void)
{
    struct rng r;
    rng_seed(&r, 42);
    unsigned long long a = (unsigned long long)rng_next(&r);
    char *path = ckpt_path("ck", 3);
    if (!path)
        return 1;
    printf("rng %llu below %llu path %s err %s\n", a, (unsigned long long)rng_below(&r, 10),
           path, err_str(DDP_EINVAL));
    free(path);
    return 0;
}
"""


def run(argv, env=None, timeout=120, **kw):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    return r


def must(argv, **kw):
    r = run(argv, **kw)
    assert r.returncode == 0, (argv, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def project_version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        m = re.search(r"project\(ddp VERSION ([0-9.]+)", f.read())
    assert m, "no project(ddp VERSION ...) in CMakeLists.txt"
    return m.group(1)


def needed(path):
    out = must(["readelf", "-d", path]).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out), \
        re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]+)\]", out)


def check_layout(prefix):
    for rel in ("sbin/ddpd", "sbin/ddp-agent", "bin/ddpctl", "bin/ddp-worker"):
        p = os.path.join(prefix, rel)
        assert os.path.isfile(p) and os.access(p, os.X_OK), p
    for h in ("rng.h", "ckpt.h", "ddp.h", "comm.h", "common/err.h", "common/exitcodes.h"):
        assert os.path.isfile(os.path.join(prefix, "include", "ddp", h)), h
    pcs = glob.glob(os.path.join(prefix, "**", "pkgconfig", "ddp.pc"), recursive=True)
    assert len(pcs) == 1, pcs
    libdir = os.path.dirname(os.path.dirname(pcs[0]))
    assert os.path.isfile(os.path.join(libdir, "libddp.a")), os.listdir(libdir)
    assert glob.glob(os.path.join(libdir, "libddp.so.*")), os.listdir(libdir)
    for lib in ("libddpgpu.so", "libddptrainergpu.so"):  # built only where CUDA was found
        if os.path.exists(os.path.join(BUILD, "lib", lib)):
            assert os.path.isfile(os.path.join(libdir, lib)), (lib, os.listdir(libdir))
        else:
            print("note: %s not built here (no CUDA): its install is not checked" % lib)
    for rel in ("share/man/man1/ddpctl.1", "share/man/man1/ddp-worker.1",
                "share/man/man8/ddpd.8", "share/man/man8/ddp-agent.8",
                "share/bash-completion/completions/ddpctl", "share/zsh/site-functions/_ddpctl",
                "share/doc/ddp/README.md", "share/doc/ddp/cli.md",
                "share/doc/ddp/operations.md"):
        assert os.path.isfile(os.path.join(prefix, rel)), rel
    # The units name this install's daemons, not the /usr/local/bin of deploy/systemd.
    for unit in ("ddpd", "ddp-agent"):
        with open(os.path.join(prefix, "lib/systemd/system/%s.service" % unit)) as f:
            text = f.read()
        m = re.search(r"^ExecStart=(\S+)", text, re.M)
        assert m and m.group(1) == os.path.join(prefix, "sbin", unit), (unit, m and m.group(1))
    # Each binary's RUNPATH, read as the loader does ($ORIGIN = its folder), is the lib folder:
    # the GPU libraries dlopen'd by name are found there.
    for rel in ("sbin/ddpd", "sbin/ddp-agent", "bin/ddpctl", "bin/ddp-worker"):
        p = os.path.join(prefix, rel)
        _, paths = needed(p)
        dirs = [os.path.realpath(d.replace("$ORIGIN", os.path.dirname(p)))
                for rp in paths for d in rp.split(":")]
        assert os.path.realpath(libdir) in dirs, (rel, paths)
    return libdir, pcs[0]


def build_setting(name):
    """A value of the build's CMakeCache.txt, or None."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def check_pkgconfig(prefix, libdir, tmp):
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(must(
        ["sh", "-c", "ls %s/pkgconfig/ddp.pc" % libdir]).stdout.strip()))
    version = project_version()
    r = must(["pkg-config", "--modversion", "ddp"], env=env)
    assert r.stdout.strip() == version, r.stdout
    src = os.path.join(tmp, "prog.c")
    with open(src, "w") as f:
        f.write(PROGRAM)
    cc = build_setting("CMAKE_C_COMPILER") or os.environ.get("CC", "cc")
    strict = ["-std=c11", "-Wall", "-Wextra", "-Werror"]
    if build_setting("DDP_SANITIZE") in ("ON", "TRUE", "1"):
        # An instrumented libddp needs the sanitizer runtimes in the program too.
        strict.append("-fsanitize=address,undefined")
    shared_flags = must(["pkg-config", "--cflags", "--libs", "ddp"], env=env).stdout.split()
    static_flags = must(["pkg-config", "--static", "--cflags", "--libs", "ddp"],
                        env=env).stdout.split()
    assert "-lddp" in static_flags, static_flags
    # The linker takes libddp.so before libddp.a from one folder: name the archive, so that
    # what is checked is that --static's flags are all a static libddp needs.
    static_flags = ["-l:libddp.a" if f == "-lddp" else f for f in static_flags]
    outs = {}
    for kind, flags in (("shared", shared_flags), ("static", static_flags)):
        exe = os.path.join(tmp, "prog-" + kind)
        must([cc] + strict + [src, "-o", exe] + flags)
        libs, _ = needed(exe)
        has_ddp = any(n.startswith("libddp.so") for n in libs)
        assert has_ddp == (kind == "shared"), (kind, libs)
        r = must([exe], env=dict(os.environ, LD_LIBRARY_PATH=libdir) if kind == "shared" else None)
        outs[kind] = r.stdout
        assert re.match(r"^rng \d+ below \d path ck/\S+ err \S", r.stdout), (kind, r.stdout)
    assert outs["shared"] == outs["static"], outs
    print("pkg-config: shared and static programs ran: %s" % outs["shared"].strip())


def check_man(prefix):
    pages = sorted(glob.glob(os.path.join(prefix, "share/man/man*/*")))
    assert len(pages) == 4, pages
    for page in pages:
        if shutil.which("man"):
            r = run(["man", "--warnings", "-E", "UTF-8", "-l", page],
                    env=dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat",
                             LC_ALL="C.UTF-8"))
        elif shutil.which("groff"):
            r = run(["groff", "-man", "-Tutf8", "-ww", "-z", page])
        else:
            raise AssertionError("neither man nor groff: install man-db or groff-base "
                                 "(tests/run.sh does)")
        assert r.returncode == 0 and r.stderr.strip() == "", (page, r.returncode, r.stderr)
        name = os.path.basename(page).rsplit(".", 1)[0]
        if shutil.which("man"):
            assert name.upper() in r.stdout and "NAME" in r.stdout, (page, r.stdout[:300])


# The flags a program's --help names that its man page does not: the page is the one a user
# reads, so a flag added to --help and not to the page is a failure here.
CTL_COMMANDS = ("submit", "list", "status", "cancel", "delete", "update", "logs", "nodes",
                "users", "groups", "cluster", "whoami", "watch", "wait")
# Flags a --help names that are another program's (submit's help names ddpd's limit).
NOT_OWN = {"--max-user-priority"}


def check_man_flags(prefix):
    pages = {"ddpd": "share/man/man8/ddpd.8", "ddp-agent": "share/man/man8/ddp-agent.8",
             "ddp-worker": "share/man/man1/ddp-worker.1", "ddpctl": "share/man/man1/ddpctl.1"}
    progs = {"ddpd": "sbin/ddpd", "ddp-agent": "sbin/ddp-agent", "ddp-worker": "bin/ddp-worker",
             "ddpctl": "bin/ddpctl"}
    for name, page in pages.items():
        with open(os.path.join(prefix, page)) as f:
            text = f.read().replace("\\-", "-")
        helps = [[]] + ([[c] for c in CTL_COMMANDS] if name == "ddpctl" else [])
        for args in helps:
            r = run([os.path.join(prefix, progs[name])] + args + ["--help"], timeout=30)
            assert r.returncode == 0, (name, args, r.returncode, r.stderr)
            flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", r.stdout + r.stderr))
            assert len(flags) >= 2, (name, args, r.stdout[:300])
            missing = sorted(f for f in flags - NOT_OWN
                             if not re.search(re.escape(f) + r"(?![a-z0-9-])", text))
            assert not missing, "%s: %s --help names %s, which the man page %s does not" % (
                name, " ".join(args), ", ".join(missing), page)


def check_completion(prefix):
    bash_file = os.path.join(prefix, "share/bash-completion/completions/ddpctl")
    r = must(["bash", "-c", "source %s && complete -p ddpctl" % bash_file])
    assert "-F _ddpctl ddpctl" in r.stdout, r.stdout
    # A real completion: the commands, list's flags, and -o's formats.
    script = ("source %s; COMP_WORDS=(%%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _ddpctl; "
              "echo \"${COMPREPLY[*]}\"" % bash_file)
    for words, want in (("ddpctl ''", "submit"), ("ddpctl list --no", "--no-headers"),
                        ("ddpctl -o ''", "wide"), ("ddpctl cancel --s", "--server"),
                        ("ddpctl nodes ''", "drain")):
        r = must(["bash", "-c", script % words])
        assert want in r.stdout.split(), (words, r.stdout)
    zsh_file = os.path.join(prefix, "share/zsh/site-functions/_ddpctl")
    if not shutil.which("zsh"):
        print("note: zsh is not installed here: the zsh completion's check is skipped")
        return
    r = must(["zsh", "-n", zsh_file])
    r = must(["zsh", "-f", "-c", "fpath=(%s $fpath); autoload -Uz compinit && compinit -u "
              "-d %s/zcompdump && print -r -- ${_comps[ddpctl]}"
              % (os.path.dirname(zsh_file), os.path.dirname(zsh_file))])
    assert r.stdout.strip() == "_ddpctl", r.stdout


def check_versions(prefix):
    version = project_version()
    for rel in ("sbin/ddpd", "sbin/ddp-agent", "bin/ddpctl", "bin/ddp-worker"):
        r = run([os.path.join(prefix, rel), "--version"], timeout=30)
        name = os.path.basename(rel)
        assert r.returncode == 0, (rel, r.returncode, r.stderr)
        assert re.fullmatch(r"%s %s \(commit ([0-9a-f]{7,}|unknown)\)\n" % (
            re.escape(name), re.escape(version)), r.stdout), (rel, r.stdout)


def test_install():
    tmp = tempfile.mkdtemp(prefix="ddp-install-")
    try:
        prefix = os.path.join(tmp, "prefix")
        must(["cmake", "--install", BUILD, "--prefix", prefix], timeout=300)
        libdir, _ = check_layout(prefix)
        check_pkgconfig(prefix, libdir, tmp)
        check_man(prefix)
        check_man_flags(prefix)
        check_completion(prefix)
        check_versions(prefix)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    test_install()
    print("install: ok")
    sys.exit(0)
