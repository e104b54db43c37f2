"""meta-eval: adaptation jobs from each start, their statistics and plots."""
