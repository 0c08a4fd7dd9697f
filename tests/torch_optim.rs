//! The optimizers against PyTorch: every case of `tests/data/torch_optim.json` (recorded by
//! `benches/peers/torch_optim_reference.py`: SGD with momentum, dampening, Nesterov and
//! `maximize`; Adam and AdamW, also with AMSGrad and maximizing; RMSprop plain, centred with momentum, maximizing; Adagrad plain,
//! with decay and an initial accumulator, maximizing) gives PyTorch's float64 parameter after
//! each of its steps, as a local parameter and as a global one split over 3 simulated ranks.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;
use serde_json::Value;

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The optimizer of `case` over `p`, with PyTorch's keyword arguments mapped to the builders.
fn make(case: &Value, p: Tensor) -> Box<dyn Optimizer> {
    let o = &case["options"];
    let num = |k: &str, default: f64| o.get(k).and_then(Value::as_f64).unwrap_or(default);
    let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    let lr = num("lr", 0.0);
    match case["optimizer"].as_str().unwrap() {
        "sgd" => Box::new(
            optim::Sgd::new(vec![p], lr)
                .momentum(num("momentum", 0.0))
                .dampening(num("dampening", 0.0))
                .nesterov(flag("nesterov"))
                .maximize(flag("maximize"))
                .weight_decay(num("weight_decay", 0.0)),
        ),
        "adam" => Box::new(
            optim::Adam::new(vec![p], lr)
                .weight_decay(num("weight_decay", 0.0))
                .amsgrad(flag("amsgrad"))
                .maximize(flag("maximize")),
        ),
        "adamw" => Box::new(
            optim::AdamW::new(vec![p], lr)
                .weight_decay(num("weight_decay", 0.01))
                .amsgrad(flag("amsgrad"))
                .maximize(flag("maximize")),
        ),
        "rmsprop" => Box::new(
            optim::RmsProp::new(vec![p], lr)
                .alpha(num("alpha", 0.99))
                .eps(num("eps", 1e-8))
                .weight_decay(num("weight_decay", 0.0))
                .momentum(num("momentum", 0.0))
                .centered(flag("centered"))
                .maximize(flag("maximize")),
        ),
        "adagrad" => Box::new(
            optim::Adagrad::new(vec![p], lr)
                .lr_decay(num("lr_decay", 0.0))
                .weight_decay(num("weight_decay", 0.0))
                .initial_accumulator_value(num("initial_accumulator_value", 0.0))
                .eps(num("eps", 1e-10))
                .maximize(flag("maximize")),
        ),
        other => panic!("no optimizer {other}"),
    }
}

/// Runs every step of `case` on a parameter made by `target`; the parameter after each step.
fn trajectory(case: &Value, target: &dyn Fn(Vec<f64>) -> Result<Tensor>) -> Result<Vec<Vec<f64>>> {
    let p = target(floats(&case["param"]["data"]))?.set_requires_grad(true);
    let mut opt = make(case, p.clone());
    let mut out = vec![];
    for g in case["grads"].as_array().unwrap() {
        let g = target(floats(g))?;
        p.set_grad(Some(g));
        opt.step()?;
        out.push(p.to_vec::<f64>()?);
    }
    Ok(out)
}

fn compare(name: &str, layout: &str, got: &[Vec<f64>], case: &Value) {
    for (step, (g, w)) in got
        .iter()
        .zip(case["after"].as_array().unwrap())
        .enumerate()
    {
        for (i, (g, w)) in g.iter().zip(floats(w)).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                "{name} ({layout}) step {step} [{i}]: {g} vs PyTorch {w}"
            );
        }
    }
}

#[test]
fn optimizers_follow_pytorchs_trajectories() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("data/torch_optim.json")).expect("torch_optim.json");
    assert_eq!(cases.len(), 15);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let local = trajectory(case, &|v| Tensor::from_vec(v, &[3, 4], Device::Cpu)).unwrap();
        compare(name, "local", &local, case);
        let global = gflow::simulate(3, |_| {
            let p = Placement::new("cpu", [0, 1, 2])?;
            trajectory(case, &|v| Tensor::from_vec(v, &[3, 4], (&p, Sbp::split(1))))
        })
        .unwrap();
        for got in global {
            compare(name, "split(1) over 3 ranks", &got, case);
        }
    }
}

#[test]
fn bad_hyper_parameters_are_refused_by_name() {
    let p = Tensor::from_vec(vec![1.0f64, 2.0], &[2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    p.set_grad(Some(
        Tensor::from_vec(vec![0.5f64, 0.5], &[2], Device::Cpu).unwrap(),
    ));
    let refused = |mut o: Box<dyn Optimizer>, name: &str| {
        let e = o.step().expect_err(name).to_string();
        assert!(e.contains(name), "{e}");
    };
    refused(
        Box::new(optim::Sgd::new(vec![p.clone()], 0.1).nesterov(true)),
        "nesterov",
    );
    refused(
        Box::new(
            optim::Sgd::new(vec![p.clone()], 0.1)
                .momentum(0.9)
                .dampening(0.5)
                .nesterov(true),
        ),
        "nesterov",
    );
    refused(
        Box::new(optim::Sgd::new(vec![p.clone()], 0.1).dampening(-1.0)),
        "dampening",
    );
    refused(
        Box::new(optim::RmsProp::new(vec![p.clone()], 0.1).alpha(f64::NAN)),
        "alpha",
    );
    refused(
        Box::new(optim::Adagrad::new(vec![p.clone()], 0.1).lr_decay(-0.1)),
        "lr_decay",
    );
    assert_eq!(
        p.to_vec::<f64>().unwrap(),
        [1.0, 2.0],
        "a refused step changed the parameter"
    );
}

#[test]
fn state_is_named_as_pytorchs() {
    let p = Tensor::from_vec(vec![1.0f64], &[1], Device::Cpu).unwrap();
    let names = |o: &dyn Optimizer| -> Vec<String> {
        o.state_tensors()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    let plain = optim::RmsProp::new(vec![p.clone()], 0.1);
    assert_eq!(names(&plain), ["state.0.step", "state.0.square_avg"]);
    let full = optim::RmsProp::new(vec![p.clone()], 0.1)
        .momentum(0.9)
        .centered(true);
    assert_eq!(
        names(&full),
        [
            "state.0.step",
            "state.0.square_avg",
            "state.0.momentum_buffer",
            "state.0.grad_avg"
        ]
    );
    assert_eq!(
        names(&optim::Adagrad::new(vec![p], 0.1)),
        ["state.0.step", "state.0.sum"]
    );
}
