"""Where inner trainings run: jobs, executors (in-process or Ray actors), environments."""
