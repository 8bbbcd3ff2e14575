"""The re-measurement procedure (C7): the plan of steps and its run."""
