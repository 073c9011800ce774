"""Where a Slurm job of executors asks to run: the node its waiting tasks want, and not
the nodes excluded for failures.

A job asks for the node with the most waiting tasks that prefer it, off the excluded
nodes. Slurm has two ways to ask. ``--prefer`` (Slurm 22.05 on) is soft, but it names node
features: it works where each node carries its own name as a feature. ``--nodelist`` names
nodes, and the job waits for that node. The manager tries ``--prefer`` where sbatch takes
it, and keeps to ``--nodelist`` once sbatch refuses a node name as a feature. Excluded
nodes go in ``--exclude``. A job that sbatch refuses with these options is submitted
again without them: they are wishes, never a reason for a job not to run.
"""

PREFER = "--prefer"
NODELIST = "--nodelist"
# what sbatch says when a --prefer names no feature of the cluster's nodes
PREFER_REFUSED = "preferred feature"


def wanted_node(wanted, excluded):
    """The node with the most waiting tasks in ``wanted`` (above zero), off ``excluded``;
    None when no such node."""
    counts = {node: count for node, count in wanted.items() if count > 0 and node not in excluded}
    return max(counts, key=counts.get) if counts else None


def placement_arguments(node_option, node, exclude):
    """sbatch's options for a job that wants ``node`` (None: any) and not ``exclude``."""
    arguments = []
    if node is not None:
        arguments.append(f"{node_option}={node}")
    if exclude:
        arguments.append(f"--exclude={','.join(exclude)}")
    return arguments


def placement_words(node, exclude):
    """Why a job asked for ``node`` or avoided ``exclude``, for the log ("" if neither)."""
    words = []
    if node is not None:
        words.append(f"asked for {node}, where waiting tasks want it")
    if exclude:
        words.append(f"not on {', '.join(exclude)}, excluded for failures")
    return f" ({'; '.join(words)})" if words else ""


def node_option(run_sbatch):
    """``--prefer`` if this sbatch takes it, else ``--nodelist``. ``run_sbatch(arguments)``
    runs sbatch and gives its exit status; sbatch parses its options before ``--version``
    answers, and fails on one it does not know."""
    return PREFER if run_sbatch([f"{PREFER}=zsched", "--version"]) == 0 else NODELIST
