"""Tidy tables -> paper-style figures and reports. Plot functions take DataFrames, return figures."""
