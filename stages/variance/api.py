"""The variance stage's public surface for the flows (flows/variance.py): the sweep grid, the sweep table's rows
and the second study's power statement.
The flow dispatches and collects; what a point is, which params it runs with, when it failed and what its row holds
are decided here."""
from .grid import RUN, apply_point, diverged, point_params, points, study_points  # noqa: F401
from .paired import plan  # noqa: F401
from .table import markdown, point_record, study_record, tabulate  # noqa: F401
