"""Lab pods: a backend whose capacity is its CPU limit runs, with its sidecar, in a cgroup
of its own with a CPU quota (100 ms periods, as Kubernetes sets them), the way a pod's
containers do. The sidecar sees the pod's cgroup as its /sys/fs/cgroup (a private mount
namespace with the pod's cgroup directories bound there, as a container's cgroup
namespace shows it), so its load reports read the pod's CPU against the pod's limit. A
neighbour is a process that spins in a pod's cgroup for a while, taking the CPU its quota
would have given the backend. Needs root and cgroups (v1 `cpu`/`cpuacct`, or v2).
"""

import os
import shlex

ROOT = "/sys/fs/cgroup"
PARENT = "outrider-lab"
PERIOD_US = 100_000


def v2():
    return os.path.exists(os.path.join(ROOT, "cgroup.controllers"))


def directories(name):
    """The pod's cgroup directories: one for v2, the cpu and cpuacct hierarchies' for v1."""
    if v2():
        return [os.path.join(ROOT, PARENT, name)]
    return [os.path.join(ROOT, controller, PARENT, name) for controller in ("cpu", "cpuacct")]


def available():
    try:
        create("probe", 1.0)
        remove("probe")
        return True
    except OSError:
        return False


def create(name, cpu_limit):
    """The pod's cgroup, with a quota of `cpu_limit` CPUs; none when `cpu_limit` is None (a
    pod without a CPU limit, which Kubernetes still runs in a cgroup of its own)."""
    if v2():
        for enable in (ROOT, os.path.join(ROOT, PARENT)):
            os.makedirs(enable, exist_ok=True)
            with open(os.path.join(enable, "cgroup.subtree_control"), "w") as f:
                f.write("+cpu")
    for directory in directories(name):
        os.makedirs(directory, exist_ok=True)
    quota = -1 if cpu_limit is None else max(1000, round(cpu_limit * PERIOD_US))
    if v2():
        with open(os.path.join(directories(name)[0], "cpu.max"), "w") as f:
            f.write(f"{'max' if quota < 0 else quota} {PERIOD_US}")
    else:
        cpu = directories(name)[0]
        with open(os.path.join(cpu, "cpu.cfs_period_us"), "w") as f:
            f.write(str(PERIOD_US))
        with open(os.path.join(cpu, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(quota))


def remove(name):
    for directory in directories(name):
        try:
            os.rmdir(directory)
        except OSError:
            pass


def cpu_seconds(name):
    """CPU time the pod's processes have used."""
    if v2():
        with open(os.path.join(directories(name)[0], "cpu.stat")) as f:
            for line in f:
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        return 0.0
    with open(os.path.join(directories(name)[1], "cpuacct.usage")) as f:
        return int(f.read().strip()) / 1e9


def inside(name, command, own_view=False):
    """`command` run in the pod's cgroup; with `own_view`, seeing the pod's cgroup as
    /sys/fs/cgroup (the sidecar, which reads its pod's CPU there)."""
    joins = "; ".join(f"echo $$ > {shlex.quote(os.path.join(d, 'cgroup.procs'))}" for d in directories(name))
    binds = ""
    if own_view:
        if v2():
            targets = [ROOT]
        else:
            targets = [os.path.join(ROOT, "cpu"), os.path.join(ROOT, "cpuacct")]
        binds = "".join(f"; mount --bind {shlex.quote(d)} {shlex.quote(t)}"
                        for d, t in zip(directories(name), targets))
    script = f"{joins}{binds}; exec \"$@\""
    prefix = ["unshare", "--mount", "--propagation", "private"] if own_view else []
    return prefix + ["sh", "-c", script, "pod"] + command


def neighbour(name):
    """A process that takes all the CPU the pod's quota lets it."""
    return inside(name, ["sh", "-c", "while :; do :; done"])
