"""A training sample: an LSTM regressor trained by Adam for `steps` in-graph iterations."""
import numpy as np
import dfc

H = 4
rng = np.random.default_rng(0)
Wx = dfc.Variable(rng.normal(size=(2, 4 * H)) * 0.3, name="Wx")
Wh = dfc.Variable(rng.normal(size=(H, 4 * H)) * 0.3, name="Wh")
Wo = dfc.Variable(rng.normal(size=(H, 1)) * 0.3, name="Wo")
opt = dfc.train.Adam(0.05)


@dfc.function(input_signature=[dfc.TensorSpec([None, None, 2], "float64"), dfc.TensorSpec([None], "float64"),
                               dfc.TensorSpec([], "int64")])
def train(xs, ys, steps):
    losses = dfc.TensorArray("float64", size=0)
    i = 0
    while i < steps:
        h = dfc.zeros([3, H], "float64")
        c = dfc.zeros([3, H], "float64")
        t = 0
        while t < dfc.shape(xs)[0]:
            z = dfc.matmul(xs[t], Wx.read_value()) + dfc.matmul(h, Wh.read_value())
            g = dfc.transpose(dfc.reshape(z, [-1, 4, H]), [1, 0, 2])
            c = dfc.sigmoid(g[1]) * c + dfc.sigmoid(g[0]) * dfc.tanh(g[3])
            h = dfc.sigmoid(g[2]) * dfc.tanh(c)
            t += 1
        loss = dfc.reduce_mean(dfc.square(dfc.reshape(dfc.matmul(h, Wo.read_value()), [-1]) - ys))
        opt.minimize(loss, [Wx, Wh, Wo])
        losses = losses.write(i, loss)
        i += 1
    return losses.stack()
