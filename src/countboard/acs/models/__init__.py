"""Text generators and text classifiers, one module per kind of backend."""
