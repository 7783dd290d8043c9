"""Image datasets of the counting protocol (FSC-147 layout) and the mosaics built from them."""
