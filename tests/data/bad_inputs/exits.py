"""A --keras module that exits while it is imported."""
import sys

sys.exit(0)
