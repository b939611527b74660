def f():
    from geotrain.solver.model import BACKENDS
