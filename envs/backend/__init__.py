"""The trainer side of builds: UnityEnvironment workers presented as one BaseEnv."""
