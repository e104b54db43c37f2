"""Environment parameters as ML-Agents configures them: samplers and lessons."""
