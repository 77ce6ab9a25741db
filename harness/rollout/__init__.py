"""Rollout engines, the agent loop and the trajectory contract."""
