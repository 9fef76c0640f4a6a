"""Writing a fleet report's files: the envbuild.fleet JSON, JUnit (one case per node x check) and the Prometheus
textfile (a `node` label). Shared by `envbuild report merge` and `envbuild doctor --ray`."""
from __future__ import annotations

from typing import Optional


def write_outputs(fleet, json_path: Optional[str], junit_path: Optional[str], prom_path: Optional[str]) -> None:
    """Write the fleet report's files (also used by `doctor --ray`)."""
    if json_path:
        from envbuild.fleet.merge import write_fleet_json

        write_fleet_json(fleet, json_path)
    if junit_path:
        from envbuild.fleet.junit import write_fleet_junit

        write_fleet_junit(fleet, junit_path)
    if prom_path:
        from envbuild.fleet.prometheus import write_fleet_prometheus

        write_fleet_prometheus(fleet, prom_path)
