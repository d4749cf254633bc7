"""The side-by-side benchmark's parts: a counting moto server, the three frameworks' task modules, their runs."""
