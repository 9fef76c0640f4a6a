"""FactUnavailable: the one error of the facts layer, in a module of its own so that the readers (nvml.py,
stack.py, stack_view.py) and the sources that call them (source.py) do not import each other."""


class FactUnavailable(Exception):
    """A fact that cannot be read here; str(exc) says why (shown as the reason of a `skip`)."""


class FactHung(FactUnavailable):
    """A reading that did not answer by its deadline: a node command (killed with its children) or NVML's snapshot
    (its thread left blocked in the driver). Not a skip: a journalctl, dmesg or nvmlInit that hangs is the node's own
    trouble (a wedged journald, filesystem or driver), so the doctor reports it as an error of the check that asked."""
