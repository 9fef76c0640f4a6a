"""FactUnavailable: the one error of the facts layer, in a module of its own so that the readers (nvml.py,
stack.py, stack_view.py) and the sources that call them (source.py) do not import each other."""


class FactUnavailable(Exception):
    """A fact that cannot be read here; str(exc) says why (shown as the reason of a `skip`)."""
