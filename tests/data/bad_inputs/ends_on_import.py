"""A --torch module that ends its process (``os._exit(0)``) while it is imported."""
import os

os._exit(0)
