"""``python -m trainer``: see :mod:`trainer.cli`."""

import logging
import os
import sys

from trainer.cli import main

if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's runtime teardown (gRPC servers, collective executors, dataset iterators) can block for seconds or
    # hang after training finished; every file is written and flushed by now, so leave without it.
    os._exit(code)
