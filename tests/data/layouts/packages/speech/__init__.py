"""speech: a regular package whose modules import each other relatively."""
