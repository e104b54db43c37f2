"""Many trainings as one: k policies stacked on a leading axis, trained in lockstep."""
