"""Measuring any nn.Module: FLOPs, parameters, time, memory, utilisation, MFU, environment."""
