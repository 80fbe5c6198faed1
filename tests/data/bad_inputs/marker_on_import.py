"""A module a run record names (the torch source of old_run/ and run_names_a_module/): importing or
calling it leaves a file in the current folder, so that the corpus sees that export ran it."""
from pathlib import Path

Path("marker-imported").write_text("placement export imported a module named by a run record\n")


def build():
    Path("marker-called").write_text("placement export called a function named by a run record\n")
