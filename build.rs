//! Compiles `proto/brunix.proto` into the gRPC service and message types, and its
//! descriptor set (served by gRPC reflection). protox parses the proto in Rust, so no
//! `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/brunix.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("brunix_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        // A request that is not a valid message is INVALID_ARGUMENT (src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::StrictCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
