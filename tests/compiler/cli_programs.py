"""dfc.functions with input signatures, compiled by `dfc compile` and run by `dfc run` in the tests."""
import dfc

I64 = dfc.TensorSpec([], "int64")
VEC = dfc.TensorSpec([None], "float32")


@dfc.function(input_signature=[I64])
def first_square_above(n):
    i = 0
    while True:
        if i * i > n:
            break
        i += 1
    return i


@dfc.function(input_signature=[VEC])
def sum_positive_until_negative(x):
    total = 0.0
    for v in x:
        if v == 0:
            continue
        if v < 0:
            break
        total += v
    return total


@dfc.function(input_signature=[I64, I64])
def nested_early_return(a, b):
    for i in range(a):
        for j in range(b):
            if i * j > 6:
                return i * 100 + j
    return -1


@dfc.function(input_signature=[VEC, I64])
def mixed(x, k):
    out = []
    for i in range(k):
        out.append(x * i if i % 2 == 0 and i > 0 else x)
    return dfc.stack(out), k > 2 or k < 0
