"""The RL environment: sandboxed SQLite, the one verifier, rewards, prompts, the environment and its TRL adapter.

The lowest layer above `sqlenv.types`: it imports nothing else of the package.
"""
