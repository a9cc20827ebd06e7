"""Inference: conversion of symbols, checkpoints, Gluon blocks and bucketing modules, the blocks it returns, and
ONNX export.

Internal: only :data:`mxnet.amp.__all__` is the API.
"""
