//! The kernels, one file per operator family; each kernel of core's list is the function of
//! its name here (`kernel_table!(forward ops)` calls them).

mod attention;
mod convert;
mod copy;
mod elementwise;
mod matmul;
mod norm;
mod reduce;
mod rows;
mod select;
mod softmax;

pub(crate) use self::{
    attention::*, copy::*, elementwise::*, matmul::*, norm::*, reduce::*, rows::*, select::*,
    softmax::*,
};
