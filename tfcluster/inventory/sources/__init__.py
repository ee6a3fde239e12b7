"""Inventory sources. Each returns HostSpecs (unvalidated) or raises InventoryError listing its problems."""
