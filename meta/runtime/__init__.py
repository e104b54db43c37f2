"""Where inner trainings run: environments for tasks, torch threads."""
